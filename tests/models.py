"""Tables of the test app: where worker subprocesses record what they ran."""

from __future__ import annotations

from django.db import models


class Execution(models.Model):
    """One execution of one task's function (one attempt) by one worker process.

    ``run_id``, ``attempt`` and ``worker_id`` tell a retry in the same run from a
    second run of the task; the fault suite's invariant checker reads them.
    """

    task_id = models.CharField(max_length=300)
    run_id = models.CharField(max_length=32, blank=True, default="")
    attempt = models.PositiveIntegerField(default=0)
    worker_id = models.CharField(max_length=64, blank=True, default="")
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"{self.task_id} in {self.pid}"
