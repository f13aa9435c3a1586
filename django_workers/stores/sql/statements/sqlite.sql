-- The statements of django-workers' hot paths on SQLite, by name.
--
-- Read by django_workers/stores/sql/queries.py as postgresql.sql is (the
-- format is described there). SQLite has one writer: a claim's UPDATE reads
-- and writes under the store's write transaction.


-- name: record_select
-- A record as the claims and the reads of tasks select it (the table as "t"):
-- its columns, then its watchers as a JSON array of [grant id, user id] pairs.
-- SQLite's aggregates keep no order before 3.44, so the decoder sorts them.
{task_columns},
(
    SELECT json_group_array(json_array(w.id, w.user_id))
    FROM django_workers_taskwatcher w WHERE w.task_id = t.id
)

-- name: workflow_select
-- A workflow row (the table as "f"): its columns, then its task records' id,
-- status, result, error and cancel reason as one JSON array of arrays; the
-- JSON columns are text, which json() nests as JSON.
{workflow_columns},
(
    SELECT json_group_array(
        json_array(t.id, t.status, json(t.result), json(t.error), t.cancel_reason)
    )
    FROM django_workers_taskrecord t WHERE t.workflow = f.id
)

-- name: insert_task
-- One fresh record unless its id is taken: never raises on the id, so inside a
-- transaction it needs no savepoint. The columns every fresh record holds
-- alike are literals; the others are bound, in the model's order.
INSERT INTO "django_workers_taskrecord" (
    "id", "key", "owner", "scope", "task_path", "args", "kwargs", "queue", "priority",
    "run_after", "options", "status", "progress", "attempts", "result", "error", "errors",
    "cancel_reason", "run_id", "worker_id", "workflow", "node", "created_at", "started_at",
    "finished_at"
) VALUES (
    %s, %s, %s, %s, %s, %s, %s, %s, %s,
    %s, %s, %s, 0, 0, NULL, NULL, '[]',
    'none', %s, NULL, %s, %s, %s, NULL,
    NULL
) ON CONFLICT (id) DO NOTHING

-- name: claim
-- Take up to a limit of ready rows in claim order; their ids. The first start
-- is kept across retries. {queue_filter}: "" or " AND queue IN (%s, ...)".
UPDATE django_workers_taskrecord
SET status = %s, worker_id = %s, started_at = COALESCE(started_at, MAX(%s, created_at)),
    attempts = attempts + 1
WHERE id IN (
    SELECT id FROM django_workers_taskrecord
    WHERE status = %s AND (run_after IS NULL OR run_after <= %s){queue_filter}
    ORDER BY priority DESC, created_at, id LIMIT %s
)
RETURNING id

-- name: claimed_records
-- The records a claim took, with their watchers. {ids}: "%s, ..." one a record.
SELECT {record_select} FROM django_workers_taskrecord t WHERE t.id IN ({ids})

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
-- its own index, up to a number of each: the caller merges them. SQLite takes
-- no parenthesised arm of a UNION, hence the subqueries.
SELECT * FROM (
    SELECT {record_select} FROM django_workers_taskrecord t
    WHERE t.owner = %s{filters}
    ORDER BY t.created_at DESC, t.id DESC LIMIT %s
) UNION ALL SELECT * FROM (
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
