"""Tables of the test app: where worker subprocesses record what they ran."""

from __future__ import annotations

from django.db import models


class Execution(models.Model):
    """One execution of one task by one worker process."""

    task_id = models.CharField(max_length=300)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"{self.task_id} in {self.pid}"
