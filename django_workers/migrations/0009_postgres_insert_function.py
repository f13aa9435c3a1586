"""PostgreSQL only: a function that inserts one fresh task record unless its id is taken.

A single submit sent as an INSERT of 25 columns is parsed, analysed and planned
by the server on every call; the same INSERT inside a PL/pgSQL function is
planned once per database session and then reused. The function holds no
session state of its own, so it works behind any connection pooler (a named
prepared statement would not behave that way in a transaction-mode pool).

Its parameters are the columns a submit binds, in this order; the other
columns get the values every fresh record has. A test inserts one task
through this function and one through a plain INSERT and compares the rows,
so a column added to the table without a new version of this function fails
the suite. Other databases get nothing here.
"""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION django_workers_insert_task(
    p_id text, p_key text, p_owner text, p_scope text, p_task_path text,
    p_args jsonb, p_kwargs jsonb, p_queue text, p_priority integer,
    p_run_after timestamptz, p_options jsonb, p_status text, p_run_id text,
    p_workflow text, p_node text, p_created_at timestamptz
) RETURNS boolean AS $$
BEGIN
    INSERT INTO django_workers_taskrecord (
        id, key, owner, scope, task_path, args, kwargs, queue, priority, run_after,
        options, status, progress, attempts, result, error, errors, cancel_reason,
        run_id, worker_id, workflow, node, created_at, started_at, finished_at
    ) VALUES (
        p_id, p_key, p_owner, p_scope, p_task_path, p_args, p_kwargs, p_queue, p_priority,
        p_run_after, p_options, p_status, 0, 0, NULL, NULL, '[]', 'none',
        p_run_id, NULL, p_workflow, p_node, p_created_at, NULL, NULL
    )
    ON CONFLICT (id) DO NOTHING;
    RETURN FOUND;
END
$$ LANGUAGE plpgsql;
"""

BACKWARD = """
DROP FUNCTION IF EXISTS django_workers_insert_task(
    text, text, text, text, text, jsonb, jsonb, text, integer, timestamptz, jsonb, text,
    text, text, text, timestamptz
);
"""


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_workers", "0008_partial_history_indexes")]

    operations = [migrations.RunPython(_on_postgres(FORWARD), _on_postgres(BACKWARD))]
