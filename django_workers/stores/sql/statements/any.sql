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


-- name: fair_owners
-- The owners of a queue's PENDING tasks, each once, in owner order: a loose scan
-- of the workers_task_pending_owner index, one probe an owner however many tasks
-- each has queued. Global tasks (owner NULL) are not among them.
WITH RECURSIVE owners (owner) AS (
    SELECT MIN(owner) FROM django_workers_taskrecord
    WHERE status = 'PENDING' AND queue = %s AND owner IS NOT NULL
    UNION ALL
    SELECT (
        SELECT MIN(r.owner) FROM django_workers_taskrecord r
        WHERE r.status = 'PENDING' AND r.queue = %s AND r.owner > owners.owner
    )
    FROM owners WHERE owners.owner IS NOT NULL
)
SELECT owner FROM owners WHERE owner IS NOT NULL


-- name: fair_running
-- A queue's RUNNING tasks by owner (the workers_task_running index).
SELECT owner, COUNT(*) FROM django_workers_taskrecord
WHERE status = 'RUNNING' AND queue = %s
GROUP BY owner


-- name: fair_heads
-- One owner's first ready tasks in claim order (the workers_task_pending_owner
-- index), as one branch of a UNION ALL. {owner}: "owner = %s" or "owner IS NULL";
-- {n}: the branch's number.
SELECT * FROM (
    SELECT id, owner, priority, created_at, queue FROM django_workers_taskrecord
    WHERE status = 'PENDING' AND queue = %s AND {owner}
        AND (run_after IS NULL OR run_after <= %s)
    ORDER BY priority DESC, created_at, id
    LIMIT %s
) AS owner{n}


-- name: visible_workflows
-- The workflows a user may see, as ``visibility.workflows`` says (the table as
-- "f"): the ones it owns, and the ones one of whose records it watches (every
-- record of a workflow is given its watchers). The two halves are read apart,
-- each along its own index. Binds the user id twice.
f.id IN (
    SELECT o.id FROM django_workers_workflowrecord o WHERE o.owner = %s
    UNION
    SELECT r.workflow FROM django_workers_taskwatcher v
    JOIN django_workers_taskrecord r ON r.id = v.task_id
    WHERE v.user_id = %s AND r.workflow IS NOT NULL
)


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
