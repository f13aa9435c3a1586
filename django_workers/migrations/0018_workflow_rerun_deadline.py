"""A workflow's run counter, its deadline and why it was cancelled.

``runs`` counts the runs of its nodes (a re-run adds one); ``deadline`` holds
the seconds it was submitted with and ``deadline_at`` when the current run
passes them (the index serves the sweep that cancels it); ``cancel_reason``
is the first accepted cancel's reason. A task's cancel reason may now be
``deadline``. Every change adds a column or widens a choice.
"""

import django_workers.cancellation
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_workers', '0017_fair_queues'),
    ]

    operations = [
        migrations.AddField(
            model_name='workflowrecord',
            name='cancel_reason',
            field=models.CharField(blank=True, max_length=12, null=True),
        ),
        migrations.AddField(
            model_name='workflowrecord',
            name='deadline',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='workflowrecord',
            name='deadline_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='workflowrecord',
            name='runs',
            field=models.PositiveIntegerField(default=1),
        ),
        migrations.AlterField(
            model_name='taskrecord',
            name='cancel_reason',
            field=models.CharField(choices=[('none', 'none'), ('user', 'user'), ('timeout', 'timeout'), ('superseded', 'superseded'), ('shutdown', 'shutdown'), ('workflow', 'workflow'), ('deadline', 'deadline')], default=django_workers.cancellation.CancelReason['NONE'], max_length=12),
        ),
        migrations.AddIndex(
            model_name='workflowrecord',
            index=models.Index(fields=['state', 'deadline_at'], name='workers_workflow_deadline'),
        ),
    ]
