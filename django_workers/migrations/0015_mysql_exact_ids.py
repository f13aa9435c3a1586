"""On MySQL and MariaDB, ids, owners, keys and queues compare exactly: byte for byte.

Their default collations compare text without case, accents or trailing
spaces, so ``alice::e`` and ``alice::E`` were one task, and ``Owner("ALICE")``
read and cancelled ``Owner("alice")``'s tasks. The columns that name a task,
a workflow, an owner or a queue get a binary collation that also tells
trailing spaces apart (``NO PAD``). Other databases compare exactly already.
"""

from typing import Any

from django.db import migrations

#: (model, field) of every column compared as a name or an id.
EXACT = [
    ("taskrecord", "id"),
    ("taskrecord", "key"),
    ("taskrecord", "owner"),
    ("taskrecord", "queue"),
    ("taskrecord", "workflow"),
    ("taskrecord", "node"),
    ("taskwatcher", "task"),
    ("taskwatcher", "user_id"),
    ("workflowrecord", "id"),
    ("workflowrecord", "key"),
    ("workflowrecord", "owner"),
    ("heldslot", "task_id"),
    ("heldslot", "queue"),
    ("queuelock", "name"),
    ("schedulerecord", "key"),
    ("schedulerecord", "owner"),
    ("schedulerecord", "queue"),
    ("schedulerecord", "last_task_id"),
]


def exact_collation(connection: Any) -> str:
    """The server's binary, NO PAD collation of utf8mb4."""
    return "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"


def make_ids_exact(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor != "mysql":
        return
    collation = exact_collation(connection)
    quote = schema_editor.quote_name
    # A column a foreign key joins cannot change: the watchers' key to the tasks' id is
    # taken off while both change, and put back as it was.
    keys = _foreign_keys(connection, apps.get_model("django_workers", "taskwatcher"))
    for table, name, _column, _target in keys:
        schema_editor.execute(f"ALTER TABLE {quote(table)} DROP FOREIGN KEY {quote(name)}")
    for model_name, field_name in EXACT:
        meta = apps.get_model("django_workers", model_name)._meta
        field = meta.get_field(field_name)
        held = field.target_field if field.is_relation else field  # a key holds an id
        null = "NULL" if field.null else "NOT NULL"
        schema_editor.execute(
            f"ALTER TABLE {quote(meta.db_table)} MODIFY {quote(field.column)} "
            f"varchar({held.max_length}) CHARACTER SET utf8mb4 COLLATE {collation} {null}"
        )
    for table, name, column, (target_table, target_column) in keys:
        schema_editor.execute(
            f"ALTER TABLE {quote(table)} ADD CONSTRAINT {quote(name)} FOREIGN KEY "
            f"({quote(column)}) REFERENCES {quote(target_table)} ({quote(target_column)})"
        )


def _foreign_keys(connection: Any, model: Any) -> list[tuple[str, str, str, tuple[str, str]]]:
    """(table, name, column, (its table, its column)) of each foreign key of ``model``."""
    table = model._meta.db_table
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return [
        (table, name, found["columns"][0], found["foreign_key"])
        for name, found in constraints.items()
        if found["foreign_key"]
    ]


class Migration(migrations.Migration):
    # MySQL cannot roll DDL back: each ALTER commits on its own.
    atomic = False
    dependencies = [("django_workers", "0014_worker_process_wake_up")]

    operations = [migrations.RunPython(make_ids_exact, migrations.RunPython.noop)]
