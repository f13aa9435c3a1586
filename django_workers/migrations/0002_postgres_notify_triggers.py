"""PostgreSQL only: NOTIFY on the django_workers channel when tasks queue, cancel or end.

Statement-level triggers with transition tables, so a bulk insert or a batch
claim sends one notification per distinct queue, not one per row. Other
databases get nothing here; their workers poll.
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
    PERFORM pg_notify('django_workers', 'e:' || q.queue)
    FROM (
        SELECT DISTINCT n.queue FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE n.status = 'PENDING' AND (o.status <> 'PENDING' OR o.run_id <> n.run_id)
    ) AS q;
    PERFORM pg_notify('django_workers', 'c:' || n.id)
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE o.status = 'RUNNING' AND (n.status = 'CANCELLED' OR n.run_id <> o.run_id);
    PERFORM pg_notify('django_workers', 'd:' || n.id)
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.status IN ('COMPLETED', 'FAILED', 'CANCELLED')
      AND (o.status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') OR o.run_id <> n.run_id);
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER django_workers_notify_insert AFTER INSERT ON {TABLE}
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION django_workers_notify_insert();

CREATE TRIGGER django_workers_notify_update AFTER UPDATE ON {TABLE}
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION django_workers_notify_update();
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
