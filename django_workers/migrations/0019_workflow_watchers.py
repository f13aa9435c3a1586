"""A workflow's watchers: the identities granted read and cancel at submit."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_workers", "0018_workflow_rerun_deadline")]

    operations = [
        migrations.AddField(
            model_name="workflowrecord",
            name="watchers",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
