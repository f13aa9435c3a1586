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
