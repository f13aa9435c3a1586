"""Fewer index writes per task: history indexes hold only the rows they can serve.

Every status change of a task writes a new entry in each index that holds its
row. The owner list, retention and workflow indexes now hold only owned,
finished and workflow rows; a plain global task's claim and end skip them.
The new indexes are built before the old ones go. On PostgreSQL, Django also
keeps a ``varchar_pattern_ops`` copy of the task id index and of the watchers'
task id index, for ``LIKE 'prefix%'`` lookups that nothing here makes (the
admin's search is ``%text%``, which no B-tree serves); they go too.
Where a database has no partial indexes (MariaDB, MySQL), Django drops the
conditions and the indexes are whole, as before.
"""

from django.db import migrations, models

#: (table, column) whose ``_like`` index PostgreSQL no longer keeps.
LIKE_INDEXES = [
    ("django_workers_taskrecord", "id"),
    ("django_workers_taskwatcher", "task_id"),
]


def _like_name(schema_editor, table, column):
    return schema_editor._create_index_name(table, [column], suffix="_like")


def drop_like_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, column in LIKE_INDEXES:
        name = _like_name(schema_editor, table, column)
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def create_like_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, column in LIKE_INDEXES:
        name = schema_editor.quote_name(_like_name(schema_editor, table, column))
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {schema_editor.quote_name(table)} "
            f"({schema_editor.quote_name(column)} varchar_pattern_ops)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("django_workers", "0007_pending_claim_indexes"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="taskrecord",
            index=models.Index(
                condition=models.Q(("owner__isnull", False)),
                fields=["owner", "-created_at"],
                name="workers_task_owner_list",
            ),
        ),
        migrations.AddIndex(
            model_name="taskrecord",
            index=models.Index(
                condition=models.Q(("finished_at__isnull", False)),
                fields=["status", "finished_at"],
                name="workers_task_ended",
            ),
        ),
        migrations.AddIndex(
            model_name="taskrecord",
            index=models.Index(
                condition=models.Q(("workflow__isnull", False)),
                fields=["workflow"],
                name="workers_task_nodes",
            ),
        ),
        migrations.RemoveIndex(model_name="taskrecord", name="workers_task_owner"),
        migrations.RemoveIndex(model_name="taskrecord", name="workers_task_finished"),
        migrations.RemoveIndex(model_name="taskrecord", name="workers_task_workflow"),
        migrations.RunPython(drop_like_indexes, create_like_indexes, elidable=False),
    ]
