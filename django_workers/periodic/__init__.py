"""Periodic tasks: schedules declared in code, ticking exactly once each across the cluster.

``DJANGO_WORKERS["SCHEDULES"]`` and the ``@periodic`` decorator declare them
(``declarations``), ``timing`` says when they tick (cron or an interval, in a
time zone), ``policy`` which due ticks a pass enqueues after downtime, and
``book`` keeps their rows and the conditional write that claims a tick. The
pass itself runs in every worker: ``django_workers.runtime.scheduler``.
"""

from __future__ import annotations

from django_workers.periodic.declarations import Schedule, periodic

__all__ = ["Schedule", "periodic"]
