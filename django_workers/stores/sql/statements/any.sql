-- The statements django-workers sends the same on every database, by name.
--
-- Read by django_workers/stores/sql/queries.py as postgresql.sql is (the
-- format is described there); a vendor's own file overrides a name.


-- name: any_ready
-- Whether a task is ready to claim: the cheap read an idle poll makes.
-- {queue_filter}: "" or " AND queue IN (%s, ...)".
SELECT 1 FROM django_workers_taskrecord
WHERE status = %s AND (run_after IS NULL OR run_after <= %s){queue_filter}
LIMIT 1

-- name: pending_queues
-- The queues with a PENDING row, in name order: one probe of the index of
-- PENDING rows by queue for each (the least name after the last one found),
-- never a read of the rows themselves.
WITH RECURSIVE pending (name) AS (
    SELECT min(queue) FROM django_workers_taskrecord WHERE status = %s
    UNION ALL
    SELECT (
        SELECT min(queue) FROM django_workers_taskrecord WHERE status = %s AND queue > p.name
    )
    FROM pending p WHERE p.name IS NOT NULL
)
SELECT name FROM pending WHERE name IS NOT NULL

-- name: ready_in_queues
-- The first ready rows of a claim in claim order (id, queue), taken from
-- each queue's own first rows: for a claim where a limited queue has less
-- room than the claim, so that its backlog is never read past row by row.
-- {queues}: one ready_in_queue for each queue, joined by UNION ALL.
SELECT id, queue FROM ({queues}) AS ready
ORDER BY priority DESC, created_at, id
LIMIT %s

-- name: ready_in_queue
-- A queue's first ready rows in claim order (status, queue, now, how many),
-- from the index of PENDING rows by queue; {n} names it in ready_in_queues.
SELECT * FROM (
    SELECT id, queue, priority, created_at FROM django_workers_taskrecord
    WHERE status = %s AND queue = %s AND (run_after IS NULL OR run_after <= %s)
    ORDER BY priority DESC, created_at, id
    LIMIT %s
) AS ready_{n}
