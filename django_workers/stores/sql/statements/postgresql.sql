-- The statements of django-workers' hot paths on PostgreSQL, by name.
--
-- Read by django_workers/stores/sql/queries.py once, at import. Each statement
-- starts at a "-- name:" line; the comment lines right after it say what it is
-- for and are not sent. "{...}" is filled once by Python where the text comes
-- from the models (column lists) or from another fragment of this file; where a
-- statement takes a dynamic part (an optional filter), its docstring says so.
-- Literal braces are doubled. The functions called here are in schema.sql.


-- name: record_select
-- A record as the claims and the reads of tasks select it (the table as "t"):
-- its columns, then its watchers' user ids in grant order. An ordered
-- aggregate, not ARRAY(... ORDER BY w.id): a limited claim turns sorting off
-- for its transaction, and the planner then read the watchers in id order
-- through their primary key, a scan of the whole watchers table for each
-- claimed row (48 ms a row at 258,000 watchers). An aggregate orders its own
-- input: the task's index serves it.
{task_columns},
(
    SELECT COALESCE(array_agg(w.user_id ORDER BY w.id), '{{}}')
    FROM django_workers_taskwatcher w WHERE w.task_id = t.id
)

-- name: workflow_select
-- A workflow row (the table as "f"): its columns, then its task records' id,
-- status, result, error and cancel reason as one JSON array of arrays.
{workflow_columns},
(
    SELECT json_agg(json_build_array(t.id, t.status, t.result, t.error, t.cancel_reason))
    FROM django_workers_taskrecord t WHERE t.workflow = f.id
)

-- name: insert_task
-- One fresh record through the function that inserts it unless its id is
-- taken (the server plans its INSERT once per session); true if inserted.
-- Its parameters are the columns a submit binds, in the model's order.
SELECT django_workers_insert_task(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)

-- name: any_ready
-- Whether a task is ready to claim, in claim order: without the order the
-- planner, expecting one row in ten to be pending, scanned the table from its
-- oldest rows (15 ms at 100,000 rows; the pending index finds it in 0.2 ms).
-- {queue_filter}: "" or " AND queue IN (%s, ...)".
SELECT 1 FROM django_workers_taskrecord
WHERE status = %s AND (run_after IS NULL OR run_after <= %s){queue_filter}
ORDER BY priority DESC, created_at, id
LIMIT 1

-- name: claim_records
-- Claim for a worker from every queue or from one (worker id, now, limit,
-- queue or NULL, whether its commit may skip waiting for the disk); the rows
-- as record_select selects them.
SELECT * FROM django_workers_claim_records(%s, %s, %s, %s, %s)

-- name: claim_fair
-- Claim for a worker that serves fair queues (worker id, now, limit, queues
-- served or NULL, the fair queues among them, their per-owner caps, whether its
-- commit may skip waiting for the disk); the rows as record_select selects them.
SELECT {record_select} FROM django_workers_claim_fair(%s, %s, %s, %s, %s, %s, %s) AS t

-- name: claim
-- Claim up to a limit of ready rows in claim order, skipping rows another
-- claimer holds: the claim of several queues, which have no index in claim
-- order and are left to the planner. {queue_filter}: "", "AND queue = %s" or
-- "AND queue = ANY(%s)".
UPDATE django_workers_taskrecord AS t
SET status = %s, worker_id = %s,
    started_at = COALESCE(t.started_at, GREATEST(%s, t.created_at)),
    attempts = t.attempts + 1
FROM (
    SELECT id FROM django_workers_taskrecord
    WHERE status = %s AND (run_after IS NULL OR run_after <= %s) {queue_filter}
    ORDER BY priority DESC, created_at, id
    LIMIT %s
    FOR UPDATE SKIP LOCKED
) AS ready
WHERE t.id = ready.id
RETURNING {record_select}

-- name: own_commit
-- Sent first in a claim that is a transaction of its own: its commit does not
-- wait for the WAL flush, about a sixth of the time an idle worker takes to
-- start a task. A claim is no end: should PostgreSQL crash before its WAL
-- writer flushed it, the record is back to PENDING under the same run id, and
-- the runtime running it keeps running it or takes the claim again. Every
-- write that ends a run stays in a transaction that waits for the disk.
SELECT set_config('synchronous_commit', 'off', true)

-- name: no_jit
-- Sent before a limited claim, for its transaction. Its window function needs
-- a sort; with ordered_claim's setting that sort's cost is enormous, which put
-- the plan over jit_above_cost: 360 ms of JIT for a claim that ran in 0.3 ms.
SELECT set_config('jit', 'off', true)

-- name: ordered_claim
-- Sent before a limited claim of every queue or of one, in its transaction:
-- with sorting off the planner takes the rows from the index of PENDING rows
-- in claim order and stops at the limit, whatever its statistics say. With an
-- empty table's statistics it read and sorted every pending row at each claim
-- instead (9 ms instead of 0.1 ms at 10,000 pending).
SELECT set_config('enable_sort', 'off', true)

-- name: make_queue_locks
-- The limited queues' lock rows, made if missing.
INSERT INTO django_workers_queuelock (name) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING

-- name: lock_queues
-- The limited queues' lock rows, locked in name order, the order every
-- claimer of those queues takes them.
SELECT name FROM django_workers_queuelock WHERE name = ANY(%s) ORDER BY name FOR UPDATE

-- name: limited_claim
-- Claim within per-queue limits, after the queues' locks are held: a statement
-- of its own, so its snapshot sees the runs of every claimer that held the
-- locks before it. Of each limited queue it takes no more rows than its limit
-- less its RUNNING records and held slots; a full queue is left out of the
-- rows it looks at. Its start time is the given time plus the time spent
-- waiting for the locks, so a sequential queue's next run starts after the
-- previous run's end was written. {queue_filter} as in claim.
WITH busy AS (
    SELECT queue FROM django_workers_taskrecord WHERE status = %s AND queue = ANY(%s)
    UNION ALL
    SELECT queue FROM django_workers_heldslot WHERE queue = ANY(%s)
), free AS (
    SELECT l.name, l.slots - (SELECT count(*) FROM busy b WHERE b.queue = l.name) AS slots
    FROM unnest(%s::text[], %s::integer[]) AS l(name, slots)
)
UPDATE django_workers_taskrecord AS t
SET status = %s, worker_id = %s,
    started_at = COALESCE(t.started_at, GREATEST(
        %s::timestamptz + (clock_timestamp() - statement_timestamp()), t.created_at
    )),
    attempts = t.attempts + 1
FROM (
    SELECT c.id, c.queue,
        row_number() OVER (
            PARTITION BY c.queue ORDER BY c.priority DESC, c.created_at, c.id
        ) AS place
    FROM (
        SELECT id, queue, priority, created_at FROM django_workers_taskrecord
        WHERE status = %s AND (run_after IS NULL OR run_after <= %s) {queue_filter}
            AND queue <> ALL(ARRAY(SELECT name FROM free WHERE slots <= 0))
        ORDER BY priority DESC, created_at, id
        LIMIT %s
        FOR UPDATE SKIP LOCKED
    ) AS c
) AS ready
LEFT JOIN free ON free.name = ready.queue
WHERE t.id = ready.id AND (free.name IS NULL OR ready.place <= free.slots)
RETURNING {record_select}

-- name: limited_claim_by_queue
-- The limited claim once a limited queue served may have less room than the
-- claim (full, or nearly): limited_claim's walk in claim order would read past
-- that queue's backlog row by row (30 ms at 100,000 pending behind a full
-- queue). Instead each queue served locks its first rows, no more than its
-- room, from the index of PENDING rows by queue, and the claim keeps the first
-- of those in claim order (the others' locks end with the claim's
-- transaction); its cost follows the number of queues, not of rows. The
-- queue's bounds are written as a range and its rows ordered by queue first,
-- an order only that index has: with the statistics of a table of one queue,
-- the planner otherwise read that queue's rows out of the index in claim
-- order. The queues served are the given ones, or, for every queue, those
-- with a PENDING row ("pending_queues": one index probe a queue). Locks,
-- counts and start time as in limited_claim. {served}: the queues served as
-- a one-column table "name" (see claim.py).
WITH RECURSIVE busy AS (
    SELECT queue FROM django_workers_taskrecord WHERE status = %s AND queue = ANY(%s)
    UNION ALL
    SELECT queue FROM django_workers_heldslot WHERE queue = ANY(%s)
), free AS (
    SELECT l.name, l.slots - (SELECT count(*) FROM busy b WHERE b.queue = l.name) AS slots
    FROM unnest(%s::text[], %s::integer[]) AS l(name, slots)
), pending_queues AS (
    SELECT min(queue) AS name FROM django_workers_taskrecord WHERE status = %s
    UNION ALL
    SELECT (
        SELECT min(queue) FROM django_workers_taskrecord WHERE status = %s AND queue > p.name
    )
    FROM pending_queues p WHERE p.name IS NOT NULL
)
UPDATE django_workers_taskrecord AS t
SET status = %s, worker_id = %s,
    started_at = COALESCE(t.started_at, GREATEST(
        %s::timestamptz + (clock_timestamp() - statement_timestamp()), t.created_at
    )),
    attempts = t.attempts + 1
FROM (
    SELECT r.id FROM ({served}) AS q
    CROSS JOIN LATERAL (
        SELECT id, priority, created_at FROM django_workers_taskrecord
        WHERE status = %s AND queue >= q.name AND queue <= q.name
            AND (run_after IS NULL OR run_after <= %s)
        ORDER BY queue, priority DESC, created_at, id
        LIMIT GREATEST(0, LEAST(%s, (SELECT f.slots FROM free f WHERE f.name = q.name)))
        FOR UPDATE SKIP LOCKED
    ) AS r
    ORDER BY r.priority DESC, r.created_at, r.id
    LIMIT %s
) AS ready
WHERE t.id = ready.id
RETURNING {record_select}

-- name: ready_within_limits
-- Before a limited claim of limits larger than the claim: whether a task is
-- ready (as any_ready), and whether a limited queue served has less room than
-- the claim, read without its lock. It only picks the claim's statement
-- (limited_claim_by_queue if so): either one takes no more than the room it
-- counts under the lock. {queue_filter} as in any_ready.
SELECT EXISTS (
    SELECT 1 FROM django_workers_taskrecord
    WHERE status = %s AND (run_after IS NULL OR run_after <= %s){queue_filter}
    ORDER BY priority DESC, created_at, id
    LIMIT 1
), EXISTS (
    SELECT FROM unnest(%s::text[], %s::integer[]) AS l(name, slots)
    WHERE l.slots
        - (SELECT count(*) FROM django_workers_taskrecord WHERE status = %s AND queue = l.name)
        - (SELECT count(*) FROM django_workers_heldslot WHERE queue = l.name)
        < %s
)

-- name: end_runs
-- Write runs' ends, given as one JSON array of objects, each fenced on its run
-- id, worker and RUNNING status; the (task id, run id) of every record ended.
-- A key whose value is JSON null gives SQL NULL: no result, no error, errors
-- and progress as they were.
SELECT ended_id, ended_run_id FROM django_workers_end_runs(%s::json)

-- name: lock_workflows
-- Workflow rows locked in id order, before any task row: the order every
-- writer takes. {columns}: the columns read.
SELECT {columns} FROM django_workers_workflowrecord WHERE id = ANY(%s) ORDER BY id FOR UPDATE

-- name: save_workflow
-- A workflow's new columns with the promotions they make: the promoted nodes
-- become PENDING only while WAITING. {assignments}: "column = %s, ...".
WITH promoted AS (
    UPDATE django_workers_taskrecord SET status = %s
    WHERE id = ANY(%s) AND status = %s
)
UPDATE django_workers_workflowrecord SET {assignments} WHERE id = %s

-- name: read_record
-- One record with its watchers.
SELECT {record_select} FROM django_workers_taskrecord t WHERE t.id = %s

-- name: list_records
-- A page of every record, newest first. {filters}: " AND t.column = %s ...".
SELECT {record_select} FROM django_workers_taskrecord t
WHERE TRUE{filters}
ORDER BY t.created_at DESC, t.id DESC LIMIT %s OFFSET %s

-- name: list_users_records
-- A user's own records and the records it watches, each newest first along
-- its own index, up to a number of each: the caller merges them (one query
-- with "owner = u OR watched" would walk the whole table newest first).
-- {filters} as in list_records.
(
    SELECT {record_select} FROM django_workers_taskrecord t
    WHERE t.owner = %s{filters}
    ORDER BY t.created_at DESC, t.id DESC LIMIT %s
) UNION ALL (
    SELECT {record_select} FROM django_workers_taskrecord t
    JOIN django_workers_taskwatcher v ON v.task_id = t.id
    WHERE v.user_id = %s{filters}
    ORDER BY t.created_at DESC, t.id DESC LIMIT %s
)

-- name: read_workflows
-- A page of workflows, newest first, each with what its status reads of its
-- records. {filters}: " AND f.column = %s ..." and alternatives.
SELECT {workflow_select} FROM django_workers_workflowrecord f
WHERE TRUE{filters}
ORDER BY f.created_at DESC, f.id DESC LIMIT %s OFFSET %s
