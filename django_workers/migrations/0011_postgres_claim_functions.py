"""PostgreSQL only: functions for a worker's claim and for the ends of its runs.

A worker sends these two statements over and over: the end of the runs that
returned (fenced on each run id) and the claim that refills their slots. Sent
as text, the server parsed and planned both on every call, about a sixth of
its time on a batch of ten no-op tasks. Inside PL/pgSQL functions each
statement is planned once per database session and the plan reused, without
any session state of the caller's (a named prepared statement would not
survive a transaction-mode connection pool).

``django_workers_claim`` takes the worker id, the time of the claim, the most
rows to take and a queue (NULL: every queue) and returns the claimed rows as
the table's own row type, so a column added later comes back without a new
version of it. Its plan is generic (planned for any limit and time), so the
rows are taken through ``id = ANY(ARRAY(...))``, which the generic plan reads
through the primary key; the plan of a join would assume a tenth of the table.
Sorting and sequential scans are off inside it, so the rows come from the
PENDING index in claim order and are updated through the primary key whatever
the table's statistics say (with those of an empty table, the planner would
read the whole table for the update). PostgreSQL plans the statement again
when the table's statistics change.

``django_workers_end_runs`` takes the ends as a JSON array of objects and
returns the id and run id of each record it ended. Neither function changes
``synchronous_commit``: an end waits for the disk, and a claim alone turns
that off for its own transaction, as it did before.

Tests claim and end through these functions and through the statements they
replace and compare the rows. Other databases get nothing here.
"""

from django.db import migrations

_CLAIM = """
        RETURN QUERY
        UPDATE django_workers_taskrecord AS t
        SET status = 'RUNNING', worker_id = p_worker,
            started_at = GREATEST(p_now, t.created_at), attempts = t.attempts + 1
        WHERE t.id = ANY(ARRAY(
            SELECT r.id FROM django_workers_taskrecord r
            WHERE r.status = 'PENDING' {queue}
                AND (r.run_after IS NULL OR r.run_after <= p_now)
            ORDER BY r.priority DESC, r.created_at, r.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ))
        RETURNING t.*;"""

FORWARD = f"""
CREATE OR REPLACE FUNCTION django_workers_claim(
    p_worker text, p_now timestamptz, p_limit integer, p_queue text
) RETURNS SETOF django_workers_taskrecord AS $$
BEGIN
    IF p_queue IS NULL THEN{_CLAIM.format(queue="")}
    ELSE{_CLAIM.format(queue="AND r.queue = p_queue")}
    END IF;
END
$$ LANGUAGE plpgsql
SET enable_sort = off SET enable_seqscan = off SET plan_cache_mode = force_generic_plan;

CREATE OR REPLACE FUNCTION django_workers_end_runs(p_ends json)
RETURNS TABLE(ended_id text, ended_run_id text) AS $$
BEGIN
    RETURN QUERY
    UPDATE django_workers_taskrecord AS t
    SET status = v.status, finished_at = v.finished_at, result = v.result,
        error = v.error, errors = COALESCE(v.errors, t.errors),
        cancel_reason = v.cancel_reason, progress = COALESCE(v.progress, t.progress)
    FROM json_to_recordset(p_ends) AS v(
        id text, run_id text, worker_id text, status text, finished_at timestamptz,
        result jsonb, error jsonb, errors jsonb, cancel_reason text, progress float8
    )
    WHERE t.id = v.id AND t.run_id = v.run_id AND t.worker_id = v.worker_id
        AND t.status = 'RUNNING'
    RETURNING t.id::text, t.run_id::text;
END
$$ LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan;
"""

BACKWARD = """
DROP FUNCTION IF EXISTS django_workers_claim(text, timestamptz, integer, text);
DROP FUNCTION IF EXISTS django_workers_end_runs(json);
"""


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_workers", "0010_running_queue_index")]

    operations = [migrations.RunPython(_on_postgres(FORWARD), _on_postgres(BACKWARD))]
