"""PostgreSQL only: a claim keeps a record's first start, which its timeout counts from.

A failed attempt with retries left goes back to PENDING with its ``started_at``
kept, and the claim of the retry leaves it as it is: a task's timeout bounds
all its attempts and the waits between them. A record claimed for the first
time (``started_at`` NULL) starts now, as before. The function is otherwise the
one migration 0011 made.
"""

from django.db import migrations

_CLAIM = """
        RETURN QUERY
        UPDATE django_workers_taskrecord AS t
        SET status = 'RUNNING', worker_id = p_worker,
            started_at = COALESCE(t.started_at, GREATEST(p_now, t.created_at)),
            attempts = t.attempts + 1
        WHERE t.id = ANY(ARRAY(
            SELECT r.id FROM django_workers_taskrecord r
            WHERE r.status = 'PENDING' {queue}
                AND (r.run_after IS NULL OR r.run_after <= p_now)
            ORDER BY r.priority DESC, r.created_at, r.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        ))
        RETURNING t.*;"""

_FUNCTION = """
CREATE OR REPLACE FUNCTION django_workers_claim(
    p_worker text, p_now timestamptz, p_limit integer, p_queue text
) RETURNS SETOF django_workers_taskrecord AS $$
BEGIN
    IF p_queue IS NULL THEN{all}
    ELSE{one}
    END IF;
END
$$ LANGUAGE plpgsql
SET enable_sort = off SET enable_seqscan = off SET plan_cache_mode = force_generic_plan;
"""

FORWARD = _FUNCTION.format(
    all=_CLAIM.format(queue=""), one=_CLAIM.format(queue="AND r.queue = p_queue")
)

BACKWARD = _FUNCTION.format(
    all=_CLAIM.format(queue="").replace(
        "COALESCE(t.started_at, GREATEST(p_now, t.created_at))", "GREATEST(p_now, t.created_at)"
    ),
    one=_CLAIM.format(queue="AND r.queue = p_queue").replace(
        "COALESCE(t.started_at, GREATEST(p_now, t.created_at))", "GREATEST(p_now, t.created_at)"
    ),
)


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_workers", "0015_mysql_exact_ids")]

    operations = [migrations.RunPython(_on_postgres(FORWARD), _on_postgres(BACKWARD))]
