"""Workflows: their table, the WORKFLOW cancel reason, an index of a workflow's nodes.

On PostgreSQL a trigger also sends ``d:<workflow id>`` on ``django_workers_done``
when a workflow reaches an end state, so ``WorkflowHandle.wait()`` wakes at once
(waiters on the rare task id equal to a workflow id just read their row again).
"""

import importlib

import django.utils.timezone
import django_workers.cancellation
from django.db import migrations, models


TABLE = "django_workers_workflowrecord"
TASKS = "django_workers_taskrecord"
ENDS = "('completed', 'failed', 'cancelled', 'compensated', 'compensation_failed')"

FORWARD = f"""
CREATE OR REPLACE FUNCTION django_workers_notify_workflow() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('django_workers_done', 'd:' || NEW.id);
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

CREATE TRIGGER django_workers_notify_workflow AFTER UPDATE ON {TABLE}
    FOR EACH ROW
    WHEN (NEW.state IN {ENDS} AND OLD.state NOT IN {ENDS})
    EXECUTE FUNCTION django_workers_notify_workflow();

-- A RUNNING record asked to stop (a cancelled workflow's running node) tells its worker
-- too: 'c:' on a cancel reason set while the record stays RUNNING.
CREATE OR REPLACE FUNCTION django_workers_notify_update() RETURNS trigger AS $$
BEGIN
    IF NEW.status = 'PENDING' THEN
        PERFORM pg_notify('django_workers', 'e:' || NEW.queue);
    ELSE
        IF OLD.status = 'RUNNING' AND (NEW.status = 'CANCELLED' OR NEW.run_id <> OLD.run_id
                OR (NEW.status = 'RUNNING' AND NEW.cancel_reason <> OLD.cancel_reason)) THEN
            PERFORM pg_notify('django_workers', 'c:' || NEW.id);
        END IF;
        IF NEW.status IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN
            PERFORM pg_notify('django_workers_done', 'd:' || NEW.id);
        END IF;
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS django_workers_notify_update ON {TASKS};
CREATE TRIGGER django_workers_notify_update AFTER UPDATE ON {TASKS}
    FOR EACH ROW
    WHEN (
        (NEW.status = 'PENDING' AND (OLD.status <> 'PENDING' OR OLD.run_id <> NEW.run_id))
        OR (OLD.status = 'RUNNING' AND (NEW.status = 'CANCELLED' OR NEW.run_id <> OLD.run_id))
        OR (OLD.status = 'RUNNING' AND NEW.status = 'RUNNING'
            AND NEW.cancel_reason <> OLD.cancel_reason)
        OR (NEW.status IN ('COMPLETED', 'FAILED', 'CANCELLED')
            AND (OLD.status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')
                 OR OLD.run_id <> NEW.run_id))
    )
    EXECUTE FUNCTION django_workers_notify_update();
"""

BACKWARD = f"""
DROP TRIGGER IF EXISTS django_workers_notify_workflow ON {TABLE};
DROP FUNCTION IF EXISTS django_workers_notify_workflow();
"""
# Going back past this migration, 0002's task trigger is put back by re-running its SQL.
_TASK_TRIGGERS = importlib.import_module("django_workers.migrations.0002_postgres_notify_triggers")
BACKWARD_TASKS = _TASK_TRIGGERS.BACKWARD + _TASK_TRIGGERS.FORWARD


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("django_workers", "0004_worker_process_plural"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkflowRecord",
            fields=[
                ("id", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("key", models.CharField(max_length=200)),
                ("owner", models.CharField(blank=True, max_length=53, null=True)),
                ("state", models.CharField(default="running", max_length=20)),
                ("plan_hash", models.CharField(max_length=64)),
                ("fail_fast", models.BooleanField(default=False)),
                ("undo_on_cancel", models.BooleanField(default=True)),
                ("unabsorbed_failure", models.BooleanField(default=False)),
                ("cancel_undo", models.BooleanField(blank=True, null=True)),
                ("outcome", models.CharField(blank=True, max_length=10, null=True)),
                ("nodes", models.JSONField(default=list)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "verbose_name": "workflow",
                "ordering": ("-created_at", "-id"),
            },
        ),
        migrations.AlterField(
            model_name="taskrecord",
            name="cancel_reason",
            field=models.CharField(
                choices=[
                    ("none", "none"),
                    ("user", "user"),
                    ("timeout", "timeout"),
                    ("superseded", "superseded"),
                    ("shutdown", "shutdown"),
                    ("workflow", "workflow"),
                ],
                default=django_workers.cancellation.CancelReason["NONE"],
                max_length=12,
            ),
        ),
        migrations.AddIndex(
            model_name="taskrecord",
            index=models.Index(fields=["workflow"], name="workers_task_workflow"),
        ),
        migrations.AddIndex(
            model_name="workflowrecord",
            index=models.Index(fields=["owner", "-created_at"], name="workers_workflow_owner"),
        ),
        migrations.AddIndex(
            model_name="workflowrecord",
            index=models.Index(fields=["-created_at", "-id"], name="workers_workflow_created"),
        ),
        migrations.AddIndex(
            model_name="workflowrecord",
            index=models.Index(fields=["state", "finished_at"], name="workers_workflow_finished"),
        ),
        migrations.RunPython(_on_postgres(FORWARD), _on_postgres(BACKWARD + BACKWARD_TASKS)),
    ]
