"""The admin page of periodic schedules: each one's timing, next and last tick, and a pause switch.

Staff see the schedules whose tasks they own; holders of ``manage_all_tasks``
see every schedule and may pause or resume them. The switch is two admin
actions that go through the schedule book (``set_paused``); nothing here
writes a task row or a schedule's declaration, which lives in code.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from django_workers import clock, visibility
from django_workers.admin.base import EMPTY, ReadOnlyAdmin, is_active_staff
from django_workers.authority import System, user_id_of
from django_workers.models import ScheduleRecord, TaskRecord
from django_workers.periodic.book import STATE_FIELDS, ScheduleState, book_for
from django_workers.periodic.overview import next_tick
from django_workers.periodic.timing import describe
from django_workers.stores import default_store
from django_workers.web_authority import authority_for_user


@admin.register(ScheduleRecord)
class ScheduleRecordAdmin(ReadOnlyAdmin[ScheduleRecord]):
    """Schedules, read-only, with "Pause" and "Resume" actions for those who manage all tasks."""

    list_display = (
        "key",
        "task_path",
        "timing_display",
        "catch_up",
        "owner",
        "state_display",
        "next_tick_display",
        "last_tick",
        "last_task_display",
    )
    list_filter = ("paused", "enabled")
    search_fields = ("key", "task_path")
    actions = ("pause_selected", "resume_selected")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in ScheduleRecord._meta.fields]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_active_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_active_staff(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ScheduleRecord]:
        user_id = user_id_of(authority_for_user(request.user))
        return ScheduleRecord.objects.filter(visibility.schedules(user_id))

    def has_manage_permission(self, request: HttpRequest) -> bool:
        """Pausing and resuming: for those who see and manage every task."""
        return is_active_staff(request) and isinstance(authority_for_user(request.user), System)

    # -- the switch, through the schedule book --

    @admin.action(description="Pause selected schedules", permissions=["manage"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[ScheduleRecord]) -> None:
        self._switch(request, queryset, paused=True)

    @admin.action(
        description="Resume selected schedules (no catching up on paused ticks)",
        permissions=["manage"],
    )
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[ScheduleRecord]) -> None:
        self._switch(request, queryset, paused=False)

    def _switch(
        self, request: HttpRequest, queryset: QuerySet[ScheduleRecord], paused: bool
    ) -> None:
        keys = list(queryset.values_list("key", flat=True))
        changed = book_for(default_store()).set_paused(keys, paused, clock.now())
        verb = "Paused" if paused else "Resumed"
        self.message_user(
            request, f"{verb} {changed} of {len(keys)} selected schedule(s).", messages.SUCCESS
        )

    # -- columns --

    @admin.display(description="when")
    def timing_display(self, row: ScheduleRecord) -> str:
        return describe(row.cron or None, row.every, row.time_zone)

    @admin.display(description="state")
    def state_display(self, row: ScheduleRecord) -> str:
        if not row.enabled:
            return "disabled in code"
        return "paused" if row.paused else "enabled"

    @admin.display(description="next tick")
    def next_tick_display(self, row: ScheduleRecord) -> str:
        if not row.enabled or row.paused:
            return EMPTY
        state = ScheduleState(**{name: getattr(row, name) for name in STATE_FIELDS})
        upcoming = next_tick(state, row.cron, row.every, row.time_zone, clock.now())
        return EMPTY if upcoming is None else upcoming.isoformat(sep=" ", timespec="seconds")

    @admin.display(description="last task")
    def last_task_display(self, row: ScheduleRecord) -> str:
        if row.last_task_id is None:
            return EMPTY
        status = (
            TaskRecord.objects.filter(pk=row.last_task_id).values_list("status", flat=True).first()
        )
        if status is None:
            return "deleted"
        url = reverse("admin:django_workers_taskrecord_change", args=[quote(row.last_task_id)])
        return format_html('<a href="{}">{}</a>', url, status)
