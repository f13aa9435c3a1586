"""The reports page: a signed-in user starts reports and watches them advance, or cancels them.

Each report is a task the user owns, in the ``reports`` queue; the page lists
their latest ones, each with ``{% task_progress %}``, which follows it through
the REST API as the user (see docs/rest-api.md).
"""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from django_workers import Owner, get_all_tasks, submit_task
from shop.tasks import write_report

#: Pages of a report, and seconds of pretend work per page: about ten seconds a report.
PAGES, SECONDS_PER_PAGE = 40, 0.25


@login_required
@require_http_methods(["GET", "POST"])
def reports(request: HttpRequest) -> HttpResponse:
    """GET: the user's latest reports. POST: start a new one, then show the list again."""
    me = Owner.for_user(request.user)
    if request.method == "POST":
        submit_task(
            f"report-{uuid.uuid4().hex[:8]}",
            write_report,
            me,
            args=[PAGES, SECONDS_PER_PAGE],
            queue="reports",
        )
        return redirect("reports")
    latest = get_all_tasks(me, queue="reports", limit=10)
    return render(request, "shop/reports.html", {"reports": latest})
