"""PostgreSQL: a fair claim reads only the tasks that can win a turn, in one statement.

The claim of ``0017_fair_queues`` read up to ``p_limit`` tasks of every owner, and
locked them, to keep ``p_limit`` of them; with five owners a claim of ten read
and locked fifty rows, in one statement per owner. This one first finds the
level the claim's turns reach: with ``n`` the RUNNING tasks of an owner in the
queue, the least turn ``T`` at which the owners' turns ``n + 1 .. T`` add up to
``p_limit``. Each owner then gives at most ``T - n`` tasks (fewer under a
per-owner cap), so a claim reads and locks about as many rows as it takes. An
owner with fewer ready tasks than its share leaves the claim short: it claims
again, counting what it took as RUNNING, until it has ``p_limit`` tasks or a
round takes none. Which tasks a claim takes is unchanged.
"""

from typing import Any

from django.db import migrations

#: The claim of a worker that serves fair queues (and no limited queue), on PostgreSQL.
#: p_queues: the queues served (NULL: every queue); p_fair and p_per_owner: the fair
#: queues among them and each one's per-owner cap (NULL: none), in name order;
#: p_own_commit: the claim is a transaction of its own, whose commit need not wait
#: for the disk (as ``django_workers_claim_records``).
#:
#: The lock rows of the fair queues with a per-owner cap are made if missing and
#: taken first, in name order, so their claimers take turns and each counts what the
#: one before it claimed. Then rounds of one statement each, until ``p_limit`` rows
#: are claimed or a round claims none. A round reads, skipping rows another claimer
#: holds: of the other queues served (a loose scan of the PENDING queue index when
#: p_queues is NULL), each queue's first tasks in claim order; of each fair queue,
#: its owners with ready tasks (a loose scan of the PENDING owner index; global
#: tasks are one owner),
#: each owner's RUNNING count ``n`` in the queue, the level ``T`` its turns reach,
#: and each owner's first ``T - n`` tasks (no more than its cap), the k-th with
#: the turn ``n + k``. A fair queue's first turns take the places in claim order
#: that the same tasks hold among themselves; the first places of all are updated,
#: each still PENDING (a row another claimer took in the meantime is left out), and
#: returned.
CLAIM_FAIR = """
CREATE OR REPLACE FUNCTION django_workers_claim_fair(
    p_worker text, p_now timestamptz, p_limit integer, p_queues text[],
    p_fair text[], p_per_owner integer[], p_own_commit boolean
) RETURNS SETOF django_workers_taskrecord AS $$
DECLARE
    v_left integer := p_limit;
    v_got integer;
BEGIN
    IF p_own_commit THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    -- A per-owner cap counts what the claimer before took: claimers of a capped queue
    -- take turns on its lock row. Elsewhere each read skips rows another claim holds.
    IF EXISTS (SELECT FROM unnest(p_per_owner) AS c (cap) WHERE c.cap IS NOT NULL) THEN
        INSERT INTO django_workers_queuelock (name)
        SELECT c.q FROM unnest(p_fair, p_per_owner) AS c (q, cap) WHERE c.cap IS NOT NULL
        ON CONFLICT DO NOTHING;
        PERFORM 1 FROM django_workers_queuelock
        WHERE name IN (
            SELECT c.q FROM unnest(p_fair, p_per_owner) AS c (q, cap) WHERE c.cap IS NOT NULL
        )
        ORDER BY name FOR UPDATE;
    END IF;
    LOOP
        RETURN QUERY
        WITH RECURSIVE pending_queues (queue) AS (
            (SELECT r.queue FROM django_workers_taskrecord r
             WHERE r.status = 'PENDING' AND p_queues IS NULL ORDER BY r.queue LIMIT 1)
            UNION ALL
            SELECT (
                SELECT r.queue FROM django_workers_taskrecord r
                WHERE r.status = 'PENDING' AND r.queue > q.queue ORDER BY r.queue LIMIT 1
            ) FROM pending_queues q WHERE q.queue IS NOT NULL
        ),
        ordinary (queue) AS (
            SELECT q.queue FROM pending_queues q
            WHERE q.queue IS NOT NULL AND q.queue <> ALL (p_fair)
            UNION ALL
            SELECT q FROM unnest(p_queues) AS q WHERE q <> ALL (p_fair)
        ),
        owners (queue, owner) AS (
            SELECT f.q, (
                SELECT r.owner FROM django_workers_taskrecord r
                WHERE r.status = 'PENDING' AND r.queue = f.q AND r.owner IS NOT NULL
                    AND (r.run_after IS NULL OR r.run_after <= p_now)
                ORDER BY r.owner LIMIT 1
            ) FROM unnest(p_fair) AS f (q)
            UNION ALL
            SELECT o.queue, (
                SELECT r.owner FROM django_workers_taskrecord r
                WHERE r.status = 'PENDING' AND r.queue = o.queue AND r.owner > o.owner
                    AND (r.run_after IS NULL OR r.run_after <= p_now)
                ORDER BY r.owner LIMIT 1
            ) FROM owners o WHERE o.owner IS NOT NULL
        ),
        running (queue, owner, n) AS (
            SELECT r.queue, r.owner, count(*)::integer FROM django_workers_taskrecord r
            WHERE r.status = 'RUNNING' AND r.queue = ANY (p_fair) GROUP BY r.queue, r.owner
        ),
        groups (queue, owner, cap, n) AS (
            SELECT g.queue, g.owner, c.cap, coalesce(u.n, 0)
            FROM (
                SELECT o.queue, o.owner FROM owners o WHERE o.owner IS NOT NULL
                UNION ALL
                SELECT f.q, NULL FROM unnest(p_fair) AS f (q) WHERE EXISTS (
                    SELECT FROM django_workers_taskrecord r
                    WHERE r.status = 'PENDING' AND r.queue = f.q AND r.owner IS NULL
                        AND (r.run_after IS NULL OR r.run_after <= p_now)
                )
            ) g
            JOIN unnest(p_fair, p_per_owner) AS c (queue, cap) ON c.queue = g.queue
            LEFT JOIN running u ON u.queue = g.queue AND u.owner IS NOT DISTINCT FROM g.owner
            WHERE c.cap IS NULL OR coalesce(u.n, 0) < c.cap
        ),
        -- The least T at which the turns n + 1 .. T of the owners add up to v_left:
        -- over the owners in order of n, the j first owners reach it at
        -- ceil((v_left + their n summed) / j), and never below the j-th one's n.
        levels (queue, level) AS (
            SELECT l.queue, min(greatest(l.n, ceil((v_left + l.s)::numeric / l.j)::integer))
            FROM (
                SELECT g.queue, g.n, sum(g.n) OVER w AS s, row_number() OVER w AS j
                FROM groups g
                WINDOW w AS (PARTITION BY g.queue ORDER BY g.n ROWS UNBOUNDED PRECEDING)
            ) l
            GROUP BY l.queue
        ),
        -- Each owner's share, the k-th task with the turn n + k. Owners and global tasks
        -- are two branches: "owner = g.owner" and "owner IS NULL" each seek the index,
        -- which "owner IS NOT DISTINCT FROM g.owner" would scan whole.
        candidates AS (
            SELECT g.queue, g.n, x.* FROM groups g JOIN levels v ON v.queue = g.queue
            CROSS JOIN LATERAL (
                SELECT y.*, row_number() OVER (
                    ORDER BY y.priority DESC, y.created_at, y.id
                )::integer AS k
                FROM (
                    SELECT r.id, r.priority::integer AS priority, r.created_at
                    FROM django_workers_taskrecord r
                    WHERE r.status = 'PENDING' AND r.queue = g.queue AND r.owner = g.owner
                        AND (r.run_after IS NULL OR r.run_after <= p_now)
                    ORDER BY r.priority DESC, r.created_at, r.id
                    LIMIT least(v.level, coalesce(g.cap, v.level)) - g.n
                    FOR UPDATE SKIP LOCKED
                ) y
            ) x
            WHERE g.owner IS NOT NULL
            UNION ALL
            SELECT g.queue, g.n, x.* FROM groups g JOIN levels v ON v.queue = g.queue
            CROSS JOIN LATERAL (
                SELECT y.*, row_number() OVER (
                    ORDER BY y.priority DESC, y.created_at, y.id
                )::integer AS k
                FROM (
                    SELECT r.id, r.priority::integer AS priority, r.created_at
                    FROM django_workers_taskrecord r
                    WHERE r.status = 'PENDING' AND r.queue = g.queue AND r.owner IS NULL
                        AND (r.run_after IS NULL OR r.run_after <= p_now)
                    ORDER BY r.priority DESC, r.created_at, r.id
                    LIMIT least(v.level, coalesce(g.cap, v.level)) - g.n
                    FOR UPDATE SKIP LOCKED
                ) y
            ) x
            WHERE g.owner IS NULL
        ),
        turns AS (
            SELECT c.queue, c.id, c.priority, c.created_at, row_number() OVER (
                PARTITION BY c.queue ORDER BY c.n + c.k, c.priority DESC, c.created_at, c.id
            ) AS place
            FROM candidates c
        ),
        places AS (
            SELECT p.queue, p.priority, p.created_at, p.id, row_number() OVER (
                PARTITION BY p.queue ORDER BY p.priority DESC, p.created_at, p.id
            ) AS place
            FROM turns p WHERE p.place <= v_left
        )
        UPDATE django_workers_taskrecord AS t
        SET status = 'RUNNING', worker_id = p_worker,
            started_at = COALESCE(t.started_at, GREATEST(p_now, t.created_at)),
            attempts = t.attempts + 1
        WHERE t.id = ANY (ARRAY(
            SELECT c.id FROM (
                SELECT x.id, x.priority::integer AS priority, x.created_at, x.id AS tiebreak
                FROM ordinary q CROSS JOIN LATERAL (
                    SELECT r.id, r.priority, r.created_at
                    FROM django_workers_taskrecord r
                    WHERE r.status = 'PENDING' AND r.queue = q.queue
                        AND (r.run_after IS NULL OR r.run_after <= p_now)
                    ORDER BY r.priority DESC, r.created_at, r.id
                    LIMIT v_left FOR UPDATE SKIP LOCKED
                ) x
                UNION ALL
                SELECT u.id, p.priority, p.created_at, p.id
                FROM turns u JOIN places p ON p.queue = u.queue AND p.place = u.place
            ) c
            ORDER BY c.priority DESC, c.created_at, c.tiebreak
            LIMIT v_left
        )) AND t.status = 'PENDING'
        RETURNING t.*;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        -- Short of p_limit: an owner had fewer ready tasks than its share, or the
        -- rows were held; what this round took now counts as RUNNING.
        EXIT WHEN v_got = 0 OR v_left <= 0;
    END LOOP;
END
$$ LANGUAGE plpgsql SET jit = off SET plan_cache_mode = force_generic_plan;
"""


def _source_of_0017() -> str:
    from importlib import import_module

    return str(import_module("django_workers.migrations.0017_fair_queues").CLAIM_FAIR)


def _create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CLAIM_FAIR)


def _restore(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_source_of_0017())


class Migration(migrations.Migration):
    dependencies = [("django_workers", "0020_pending_queue_index")]

    operations = [migrations.RunPython(_create, _restore)]
