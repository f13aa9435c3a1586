/*
 * django-workers: the {% task_progress task_id %} box on a site's own pages.
 *
 * Each <div class="dw-task"> names the REST API's detail route of its task
 * (data-dw-task-url). While the task has not ended, this reads it every
 * data-dw-interval milliseconds as the signed-in user, and shows its progress
 * and status; once it ends, the result or the error. Where the user may cancel,
 * a Cancel button PATCHes the cancel route with Django's CSRF token. Every value
 * is written as text, never as markup. The script may be loaded once per box:
 * it starts each box once.
 */
(function () {
  "use strict";

  var ENDS = { COMPLETED: true, FAILED: true, CANCELLED: true };

  function part(box, name) {
    return box.querySelector(".dw-task-" + name);
  }

  function say(box, name, text) {
    var node = part(box, name);
    if (node) {
      node.textContent = text;
    }
  }

  function outcome(task) {
    if (task.status === "COMPLETED") {
      return "Result: " + JSON.stringify(task.result);
    }
    if (task.error) {
      return task.error.type + ": " + task.error.message;
    }
    return task.status.charAt(0) + task.status.slice(1).toLowerCase();
  }

  function show(box, task) {
    var percent = Math.max(0, Math.min(100, Number(task.progress) || 0));
    var bar = part(box, "progress");
    if (bar) {
      bar.value = percent;
      bar.textContent = Math.round(percent) + "%";
    }
    say(box, "percent", Math.round(percent) + "%");
    say(box, "status", task.status);
    box.setAttribute("data-dw-status", task.status);
    if (ENDS[task.status]) {
      box.setAttribute("data-dw-ended", "1");
      say(box, "outcome", outcome(task));
      var button = part(box, "cancel");
      if (button) {
        button.hidden = true;
      }
    }
  }

  function readJson(response) {
    return response.json().then(
      function (body) {
        return { ok: response.ok, status: response.status, body: body };
      },
      function () {
        return { ok: false, status: response.status, body: {} };
      }
    );
  }

  function follow(box) {
    if (box.getAttribute("data-dw-bound") === "1") {
      return;
    }
    box.setAttribute("data-dw-bound", "1");
    var url = box.getAttribute("data-dw-task-url");
    var interval = parseInt(box.getAttribute("data-dw-interval"), 10) || 1500;
    var ended = function () {
      return box.getAttribute("data-dw-ended") === "1";
    };

    var button = part(box, "cancel");
    if (button && box.getAttribute("data-dw-can-cancel") === "1") {
      button.hidden = false;
      button.addEventListener("click", function () {
        button.disabled = true;
        fetch(box.getAttribute("data-dw-cancel-url"), {
          method: "PATCH",
          credentials: "same-origin",
          headers: {
            Accept: "application/json",
            "X-CSRFToken": box.getAttribute("data-dw-csrf"),
          },
        })
          .then(readJson)
          .then(function (answer) {
            if (answer.ok) {
              show(box, answer.body);
              say(box, "message", "Cancelled.");
            } else {
              button.disabled = false;
              say(box, "message", answer.body.detail || "Could not cancel (HTTP " + answer.status + ").");
            }
          })
          .catch(function () {
            button.disabled = false;
            say(box, "message", "Could not reach the server; try again.");
          });
      });
    }

    function poll() {
      if (ended()) {
        return;
      }
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(readJson)
        .then(function (answer) {
          if (answer.ok) {
            show(box, answer.body);
            window.setTimeout(poll, interval);
          } else if (answer.status >= 500) {
            window.setTimeout(poll, interval * 4);
          } else {
            say(box, "message", answer.body.detail || "HTTP " + answer.status);
          }
        })
        .catch(function () {
          window.setTimeout(poll, interval * 4); // a network hiccup: try again, slower
        });
    }
    poll();
  }

  var boxes = document.querySelectorAll("div.dw-task[data-dw-task-url]");
  for (var i = 0; i < boxes.length; i++) {
    follow(boxes[i]);
  }
})();
