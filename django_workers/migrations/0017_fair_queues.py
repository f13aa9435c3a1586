"""Fair queues: an index of PENDING tasks by queue and owner, and PostgreSQL's claim.

The index serves a fair queue's loose scan of its owners and each owner's next
tasks in claim order (global tasks, owner NULL, are one more owner); on PostgreSQL
without its leading status, as ``PendingQueueIndex`` says. On
PostgreSQL it also holds ``run_after``, so that it answers an owner's read alone:
a plan otherwise read the claim-order index of every queue in order and dropped
other owners' rows, thousands of them when an owner's tasks come late. On
PostgreSQL, ``django_workers_claim_fair`` is the whole claim of a worker that
serves fair queues, in one call.
"""

from django.db import migrations, models

import django_workers.models

#: The claim of a worker that serves fair queues (and no limited queue), on PostgreSQL.
#: p_queues: the queues served (NULL: every queue); p_fair and p_per_owner: the fair
#: queues among them and each one's per-owner cap (NULL: none), in name order;
#: p_own_commit: the claim is a transaction of its own, whose commit need not wait
#: for the disk (as ``django_workers_claim_records``).
#:
#: The lock rows of the fair queues with a per-owner cap are made if missing and
#: taken first, in name order, so their claimers take turns and each counts what the
#: one before it claimed. Then the candidates, each read a plain index range that
#: skips rows another claimer holds: of the other queues served (found by a
#: loose scan of the PENDING queue index), each queue's first ``p_limit`` tasks in
#: claim order; of each fair queue, its global tasks as one owner and then each owner
#: (a loose scan of the PENDING owner index), the owner's first tasks, each with its
#: turn (the owner's RUNNING tasks in the queue plus its rank), none past the cap.
#: Last, one statement: a fair queue's first ``p_limit`` turns take the places in
#: claim order that the same tasks hold among themselves, the first ``p_limit``
#: places of all are updated, each still PENDING (a row another claimer took in the
#: meantime is left out), and returned.
CLAIM_FAIR = """
CREATE OR REPLACE FUNCTION django_workers_claim_fair(
    p_worker text, p_now timestamptz, p_limit integer, p_queues text[],
    p_fair text[], p_per_owner integer[], p_own_commit boolean
) RETURNS SETOF django_workers_taskrecord AS $$
DECLARE
    v_queue text;
    v_next text;
    v_owner text;
    v_more boolean;
    v_cap integer;
    v_running integer;
    v_take integer;
    r_owner text[];
    r_count integer[];
    o_ids text[] := '{}';
    o_pri integer[] := '{}';
    o_at timestamptz[] := '{}';
    f_ids text[] := '{}';
    f_queue text[] := '{}';
    f_turn integer[] := '{}';
    f_pri integer[] := '{}';
    f_at timestamptz[] := '{}';
BEGIN
    IF p_own_commit THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    -- A per-owner cap counts what the claimer before took: claimers of a capped queue
    -- take turns on its lock row. Elsewhere each read skips rows another claim holds.
    INSERT INTO django_workers_queuelock (name)
    SELECT c.q FROM unnest(p_fair, p_per_owner) AS c (q, cap) WHERE c.cap IS NOT NULL
    ON CONFLICT DO NOTHING;
    PERFORM 1 FROM django_workers_queuelock
    WHERE name IN (
        SELECT c.q FROM unnest(p_fair, p_per_owner) AS c (q, cap) WHERE c.cap IS NOT NULL
    )
    ORDER BY name FOR UPDATE;

    -- The other queues' first tasks, a queue at a time, each read with the next queue.
    IF p_queues IS NULL THEN
        SELECT r.queue INTO v_queue FROM django_workers_taskrecord r
        WHERE r.status = 'PENDING' ORDER BY r.queue LIMIT 1;
    ELSE
        SELECT min(q) INTO v_queue FROM unnest(p_queues) q WHERE q <> ALL(p_fair);
    END IF;
    WHILE v_queue IS NOT NULL LOOP
        IF v_queue = ANY(p_fair) THEN
            v_next := v_queue;
        ELSE
            SELECT o_ids || array_agg(x.id), o_pri || array_agg(x.priority),
                o_at || array_agg(x.created_at)
            INTO o_ids, o_pri, o_at
            FROM (
                SELECT r.id, r.priority::integer AS priority, r.created_at
                FROM django_workers_taskrecord r
                WHERE r.status = 'PENDING' AND r.queue = v_queue
                    AND (r.run_after IS NULL OR r.run_after <= p_now)
                ORDER BY r.priority DESC, r.created_at, r.id
                LIMIT p_limit
                FOR UPDATE SKIP LOCKED
            ) x;
            v_next := v_queue;
        END IF;
        IF p_queues IS NULL THEN
            SELECT r.queue INTO v_queue FROM django_workers_taskrecord r
            WHERE r.status = 'PENDING' AND r.queue > v_next ORDER BY r.queue LIMIT 1;
        ELSE
            SELECT min(q) INTO v_queue FROM unnest(p_queues) q
            WHERE q > v_next AND q <> ALL(p_fair);
        END IF;
    END LOOP;

    -- Each fair queue's owners' first tasks with their turns: global tasks, then the
    -- owners in owner order, each owner's tasks read with the next owner.
    FOR i IN 1 .. coalesce(array_length(p_fair, 1), 0) LOOP
        v_queue := p_fair[i];
        v_cap := p_per_owner[i];
        SELECT array_agg(r.owner), array_agg(r.n) INTO r_owner, r_count FROM (
            SELECT owner, count(*)::integer AS n FROM django_workers_taskrecord
            WHERE status = 'RUNNING' AND queue = v_queue GROUP BY owner
        ) r;
        v_owner := NULL;
        v_more := true;
        WHILE v_more LOOP
            v_running := coalesce(r_count[array_position(r_owner, v_owner)], 0);
            v_take := CASE WHEN v_cap IS NULL THEN p_limit
                ELSE greatest(least(p_limit, v_cap - v_running), 0) END;
            IF v_owner IS NULL THEN
                SELECT f_ids || array_agg(x.id), f_queue || array_agg(v_queue),
                    f_turn || array_agg(v_running + x.k), f_pri || array_agg(x.priority),
                    f_at || array_agg(x.created_at), (
                        SELECT r.owner FROM django_workers_taskrecord r
                        WHERE r.status = 'PENDING' AND r.queue = v_queue
                            AND r.owner IS NOT NULL
                        ORDER BY r.owner LIMIT 1
                    )
                INTO f_ids, f_queue, f_turn, f_pri, f_at, v_next
                FROM (
                    SELECT y.*, row_number() OVER (
                        ORDER BY y.priority DESC, y.created_at, y.id
                    )::integer AS k FROM (
                        SELECT r.id, r.priority::integer AS priority, r.created_at
                        FROM django_workers_taskrecord r
                        WHERE r.status = 'PENDING' AND r.queue = v_queue AND r.owner IS NULL
                            AND (r.run_after IS NULL OR r.run_after <= p_now)
                        ORDER BY r.priority DESC, r.created_at, r.id
                        LIMIT v_take
                        FOR UPDATE SKIP LOCKED
                    ) y
                ) x;
            ELSE
                SELECT f_ids || array_agg(x.id), f_queue || array_agg(v_queue),
                    f_turn || array_agg(v_running + x.k), f_pri || array_agg(x.priority),
                    f_at || array_agg(x.created_at), (
                        SELECT r.owner FROM django_workers_taskrecord r
                        WHERE r.status = 'PENDING' AND r.queue = v_queue
                            AND r.owner > v_owner
                        ORDER BY r.owner LIMIT 1
                    )
                INTO f_ids, f_queue, f_turn, f_pri, f_at, v_next
                FROM (
                    SELECT y.*, row_number() OVER (
                        ORDER BY y.priority DESC, y.created_at, y.id
                    )::integer AS k FROM (
                        SELECT r.id, r.priority::integer AS priority, r.created_at
                        FROM django_workers_taskrecord r
                        WHERE r.status = 'PENDING' AND r.queue = v_queue AND r.owner = v_owner
                            AND (r.run_after IS NULL OR r.run_after <= p_now)
                        ORDER BY r.priority DESC, r.created_at, r.id
                        LIMIT v_take
                        FOR UPDATE SKIP LOCKED
                    ) y
                ) x;
            END IF;
            v_more := v_next IS NOT NULL;
            v_owner := v_next;
        END LOOP;
    END LOOP;

    RETURN QUERY
    WITH turns AS (
        SELECT f.*, row_number() OVER (
            PARTITION BY f.queue ORDER BY f.turn, f.priority DESC, f.created_at, f.id
        ) AS place
        FROM unnest(f_ids, f_queue, f_turn, f_pri, f_at)
            AS f (id, queue, turn, priority, created_at)
    ),
    places AS (
        SELECT p.queue, p.priority, p.created_at, p.id, row_number() OVER (
            PARTITION BY p.queue ORDER BY p.priority DESC, p.created_at, p.id
        ) AS place
        FROM turns p WHERE p.place <= p_limit
    )
    UPDATE django_workers_taskrecord AS t
    SET status = 'RUNNING', worker_id = p_worker,
        started_at = COALESCE(t.started_at, GREATEST(p_now, t.created_at)),
        attempts = t.attempts + 1
    WHERE t.id = ANY(ARRAY(
        SELECT c.id FROM (
            SELECT o.id, o.priority, o.created_at, o.id AS tiebreak
            FROM unnest(o_ids, o_pri, o_at) AS o (id, priority, created_at)
            UNION ALL
            SELECT u.id, p.priority, p.created_at, p.id
            FROM turns u JOIN places p ON p.queue = u.queue AND p.place = u.place
        ) c
        ORDER BY c.priority DESC, c.created_at, c.tiebreak
        LIMIT p_limit
    )) AND t.status = 'PENDING'
    RETURNING t.*;
END
$$ LANGUAGE plpgsql SET jit = off SET plan_cache_mode = force_generic_plan;
"""

DROP_CLAIM_FAIR = """
DROP FUNCTION IF EXISTS django_workers_claim_fair(
    text, timestamptz, integer, text[], text[], integer[], boolean
);
"""


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_workers", "0016_claim_keeps_first_start")]

    operations = [
        migrations.AddIndex(
            model_name="taskrecord",
            index=django_workers.models.PendingQueueIndex(
                condition=models.Q(("status", "PENDING")),
                fields=["status", "queue", "owner", "-priority", "created_at", "id"],
                include=["run_after"],
                name="workers_task_pending_owner",
            ),
        ),
        migrations.RunPython(_on_postgres(CLAIM_FAIR), _on_postgres(DROP_CLAIM_FAIR)),
    ]
