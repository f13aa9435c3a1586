"""The claim indexes hold PENDING rows only.

The new indexes are built before the old ones go, so the claim always has one.
Where a database has no partial indexes (MariaDB, MySQL) Django drops the
condition, and the claim indexes are the full ones they replace.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_workers", "0006_schedules"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="taskrecord",
            index=models.Index(
                condition=models.Q(("status", "PENDING")),
                fields=["status", "-priority", "created_at", "id"],
                name="workers_task_pending",
            ),
        ),
        migrations.AddIndex(
            model_name="taskrecord",
            index=models.Index(
                condition=models.Q(("status", "PENDING")),
                fields=["status", "queue", "-priority", "created_at", "id"],
                name="workers_task_pending_queue",
            ),
        ),
        migrations.RemoveIndex(model_name="taskrecord", name="workers_task_claim"),
        migrations.RemoveIndex(model_name="taskrecord", name="workers_task_claim_queue"),
    ]
