"""PostgreSQL: the index of PENDING rows by queue leads with the queue.

PostgreSQL leaves out of a scan of a partial index the conditions the index's
own condition implies, so ``status = 'PENDING'`` never bounded a scan of
``(status, queue, ...) WHERE status = 'PENDING'``: a look-up of one queue read
the index from its first entry, through every pending row of the queues before
it. A claim of one queue, and a limited claim's look-ups of the queues that are
not full, cost as much as the whole backlog (30 ms at 100,000 pending rows
behind a full queue). ``(queue, priority DESC, created_at, id)`` seeks the
queue. Only the PostgreSQL index changes: SQLite bounds the scan with
``status``, and MariaDB and MySQL, with no partial indexes, need it.
"""

from typing import Any

from django.db import migrations, models

import django_workers.models

_FIELDS = ["status", "queue", "-priority", "created_at", "id"]
_NAME = "workers_task_pending_queue"
_PENDING = models.Q(("status", "PENDING"))


def _rebuild(old: models.Index, new: models.Index) -> Any:
    def rebuild(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        model = apps.get_model("django_workers", "TaskRecord")
        schema_editor.remove_index(model, old)
        schema_editor.add_index(model, new)

    return rebuild


_BEFORE = models.Index(condition=_PENDING, fields=_FIELDS, name=_NAME)
_AFTER = django_workers.models.PendingQueueIndex(condition=_PENDING, fields=_FIELDS, name=_NAME)


class Migration(migrations.Migration):
    dependencies = [("django_workers", "0019_workflow_watchers")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(_rebuild(_BEFORE, _AFTER), _rebuild(_AFTER, _BEFORE)),
            ],
            state_operations=[
                migrations.RemoveIndex(model_name="taskrecord", name=_NAME),
                migrations.AddIndex(model_name="taskrecord", index=_AFTER),
            ],
        ),
    ]
