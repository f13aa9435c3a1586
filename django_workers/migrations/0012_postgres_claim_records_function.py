"""PostgreSQL only: a function that claims and returns whole records with their watchers.

A claim used to send ``SELECT <25 columns>, (<the watchers>) FROM
django_workers_claim(...)``: the server parsed, analysed and planned that outer
statement on every claim, the larger part of the claim's time on an idle worker
(about 0.5 ms of 2 ms on a two-core machine). Inside this PL/pgSQL function the
same statement is planned once per database session. It holds no session state
of its own, so it works behind any connection pooler, and being one statement
it can be sent with its values bound on the server.

``p_own_commit``: the claim is a transaction of its own (autocommit), so its
commit need not wait for the WAL flush; the function turns
``synchronous_commit`` off for that transaction, which the caller used to do
with a statement of its own. Inside a caller's transaction, or sent with the
ends of runs, it is false and the commit waits for the disk as usual.

The result columns are the task table's in the model's field order, then the
watchers' user ids in grant order. A test compares them with the model's
fields, so a column added to the table without a new version of this function
fails the suite. Other databases get nothing here.
"""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION django_workers_claim_records(
    p_worker text, p_now timestamptz, p_limit integer, p_queue text, p_own_commit boolean
) RETURNS TABLE(
    id varchar, key varchar, owner varchar, scope varchar, task_path varchar,
    args jsonb, kwargs jsonb, queue varchar, priority smallint, run_after timestamptz,
    options jsonb, status varchar, progress double precision, attempts integer,
    result jsonb, error jsonb, errors jsonb, cancel_reason varchar, run_id varchar,
    worker_id varchar, workflow varchar, node varchar, created_at timestamptz,
    started_at timestamptz, finished_at timestamptz, watchers varchar[]
) AS $$
#variable_conflict use_column
BEGIN
    IF p_own_commit THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN QUERY
    SELECT t.id, t.key, t.owner, t.scope, t.task_path, t.args, t.kwargs, t.queue,
        t.priority, t.run_after, t.options, t.status, t.progress, t.attempts, t.result,
        t.error, t.errors, t.cancel_reason, t.run_id, t.worker_id, t.workflow, t.node,
        t.created_at, t.started_at, t.finished_at,
        (
            SELECT COALESCE(array_agg(w.user_id ORDER BY w.id), '{}')
            FROM django_workers_taskwatcher w WHERE w.task_id = t.id
        )
    FROM django_workers_claim(p_worker, p_now, p_limit, p_queue) AS t;
END
$$ LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan;
"""

BACKWARD = """
DROP FUNCTION IF EXISTS django_workers_claim_records(text, timestamptz, integer, text, boolean);
"""


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_workers", "0011_postgres_claim_functions")]

    operations = [migrations.RunPython(_on_postgres(FORWARD), _on_postgres(BACKWARD))]
