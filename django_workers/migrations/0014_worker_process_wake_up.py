"""How each worker learns of new work, in its lease row, for ``manage.py workers status``.

A worker behind a pooler in transaction mode finds that NOTIFY never reaches
its LISTEN and polls instead; the row says so, next to its heartbeat.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_workers", "0013_node_label_width")]

    operations = [
        migrations.AddField(
            model_name="workerprocess",
            name="wake_up",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
    ]
