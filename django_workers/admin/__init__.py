"""The Django admin for tasks, workflows, worker processes and schedules: cancelling via the API.

Every page is scoped by the signed-in user's authority (``web_authority``):
staff see the tasks they own or watch and the workflows they own, holders of
``manage_all_tasks`` see all. A task or workflow a user may not see is 404,
exactly like one that does not exist. No page writes a task or workflow row:
cancelling goes through ``cancel_task`` or ``cancel_workflow``, running a task
again through ``operations.retry_as`` (``admin/retrying.py``), and pausing a
schedule through its schedule book. The queues page (``admin/queues.py``) and
the live parts of the task and workflow pages (``admin/live.py``) only read.
"""

from __future__ import annotations

# Importing the page modules registers them with the admin site.
from django_workers.admin import schedules, tasks, workers, workflows

__all__ = ["schedules", "tasks", "workers", "workflows"]
