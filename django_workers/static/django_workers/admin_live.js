/*
 * django-workers: keeps a running task's or workflow's admin page up to date.
 *
 * The page's <script data-dw-live-url=...> names a JSON view of the admin
 * (django_workers/admin/live.py). While the task or workflow has not ended, this
 * polls it every data-dw-interval milliseconds and puts the server-rendered
 * parts into the page; once it has ended, or the actions its buttons offer
 * (data-dw-actions) differ, it reloads the page once, whose buttons and outcome
 * change then. Without JavaScript the page is the same,
 * only still.
 */
(function () {
  "use strict";

  function put(selector, html, asText) {
    var node = document.querySelector(selector);
    if (!node || html === undefined) {
      return;
    }
    if (asText) {
      node.textContent = html;
    } else {
      node.innerHTML = html;
    }
  }

  var show = {
    task: function (now) {
      put(".field-status_display .readonly", now.status_html);
      put(".field-progress_display .readonly", now.progress_html);
      put(".field-attempts_display .readonly", now.attempts_display, true);
      put(".field-duration_display .readonly", now.duration, true);
    },
    workflow: function (now) {
      put(".dw-summary .dw-state-cell", now.state_html);
      put(".dw-dag-frame", now.picture);
      put("#dw-nodes tbody", now.nodes_html);
    },
  };

  function follow(script) {
    var url = script.getAttribute("data-dw-live-url");
    var kind = script.getAttribute("data-dw-kind");
    var interval = parseInt(script.getAttribute("data-dw-interval"), 10) || 1500;
    if (script.getAttribute("data-dw-ended") === "1" || !show[kind]) {
      return;
    }
    function poll() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) {
          if (response.status === 403 || response.status === 404) {
            return null; // gone, or no longer visible: stop, the page shows what it last read
          }
          if (!response.ok) {
            throw new Error("HTTP " + response.status);
          }
          return response.json();
        })
        .then(function (now) {
          if (now === null) {
            return;
          }
          var actions = script.getAttribute("data-dw-actions");
          if (now.ended || (actions !== null && now.actions !== actions)) {
            window.location.reload(); // its buttons change: the page draws them anew
            return;
          }
          show[kind](now);
          window.setTimeout(poll, interval);
        })
        .catch(function () {
          window.setTimeout(poll, interval * 4); // a network hiccup: try again, slower
        });
    }
    window.setTimeout(poll, interval);
  }

  var scripts = document.querySelectorAll("script[data-dw-live-url]");
  for (var i = 0; i < scripts.length; i++) {
    follow(scripts[i]);
  }
})();
