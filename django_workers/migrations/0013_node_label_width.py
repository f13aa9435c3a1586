"""The ``node`` column holds the longest node name with its undo's ``:undo`` suffix.

A node may be named with 64 characters; its undo's record holds the name and
``:undo``, 69. At 64 characters, PostgreSQL and MySQL refused the undo's
record, and so the end of the run that started it.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_workers", "0012_postgres_claim_records_function")]

    operations = [
        migrations.AlterField(
            model_name="taskrecord",
            name="node",
            field=models.CharField(blank=True, max_length=80, null=True),
        ),
    ]
