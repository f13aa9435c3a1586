"""PostgreSQL only: NOTIFY on the django_workers channel when tasks queue, cancel or end.

Inserts notify once per distinct queue of the statement; updates notify per
row, but only rows whose WHEN clause matches call the function, so claims
and progress writes pay nothing. Other databases get nothing here; their
workers poll.
"""

from django.db import migrations

TABLE = "django_workers_taskrecord"

FORWARD = f"""
CREATE OR REPLACE FUNCTION django_workers_notify_insert() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('django_workers', 'e:' || q.queue)
    FROM (SELECT DISTINCT queue FROM new_rows WHERE status = 'PENDING') AS q;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION django_workers_notify_update() RETURNS trigger AS $$
BEGIN
    IF NEW.status = 'PENDING' THEN
        PERFORM pg_notify('django_workers', 'e:' || NEW.queue);
    ELSE
        IF OLD.status = 'RUNNING' AND (NEW.status = 'CANCELLED' OR NEW.run_id <> OLD.run_id) THEN
            PERFORM pg_notify('django_workers', 'c:' || NEW.id);
        END IF;
        IF NEW.status IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN
            PERFORM pg_notify('django_workers_done', 'd:' || NEW.id);
        END IF;
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

-- One notification per distinct queue of a bulk insert.
CREATE TRIGGER django_workers_notify_insert AFTER INSERT ON {TABLE}
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION django_workers_notify_insert();

-- Row-level, but the WHEN clause is evaluated without calling the function, so a
-- claim (PENDING -> RUNNING) or a progress write costs nothing here.
CREATE TRIGGER django_workers_notify_update AFTER UPDATE ON {TABLE}
    FOR EACH ROW
    WHEN (
        (NEW.status = 'PENDING' AND (OLD.status <> 'PENDING' OR OLD.run_id <> NEW.run_id))
        OR (OLD.status = 'RUNNING' AND (NEW.status = 'CANCELLED' OR NEW.run_id <> OLD.run_id))
        OR (NEW.status IN ('COMPLETED', 'FAILED', 'CANCELLED')
            AND (OLD.status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')
                 OR OLD.run_id <> NEW.run_id))
    )
    EXECUTE FUNCTION django_workers_notify_update();
"""

BACKWARD = f"""
DROP TRIGGER IF EXISTS django_workers_notify_update ON {TABLE};
DROP TRIGGER IF EXISTS django_workers_notify_insert ON {TABLE};
DROP FUNCTION IF EXISTS django_workers_notify_update();
DROP FUNCTION IF EXISTS django_workers_notify_insert();
"""


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_workers", "0001_initial")]

    operations = [migrations.RunPython(_on_postgres(FORWARD), _on_postgres(BACKWARD))]
