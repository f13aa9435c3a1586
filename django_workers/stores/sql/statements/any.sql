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
