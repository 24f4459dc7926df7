"""Fewer indexes written per rollout: none of its own on a foreign key that a constraint or
index leads with, partial ones on columns most rows leave empty, and unique constraints
instead of `unique=True` on the attempts' text columns (no second index, for LIKE, on
PostgreSQL)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0020_replay'),
    ]

    operations = [
        migrations.AlterField(
            model_name='jobevent',
            name='job',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='jobs.evaljob'),
        ),
        migrations.AlterField(
            model_name='rolloutattempt',
            name='run_id',
            field=models.CharField(max_length=64),
        ),
        migrations.AlterField(
            model_name='rolloutattempt',
            name='seed_run',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='rollout_attempts', to='jobs.seedrun'),
        ),
        migrations.AlterField(
            model_name='rolloutattempt',
            name='token_hash',
            field=models.CharField(max_length=64),
        ),
        migrations.AlterField(
            model_name='seedrun',
            name='job',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='seed_runs', to='jobs.evaljob'),
        ),
        migrations.AlterField(
            model_name='seedrun',
            name='judge_token_hash',
            field=models.CharField(blank=True, default='', max_length=64),
        ),
        migrations.AlterField(
            model_name='seedrun',
            name='judged_rollout',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='jobs.rolloutattempt'),
        ),
        migrations.AlterField(
            model_name='seedrun',
            name='reused_from',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='jobs.seedrun'),
        ),
        migrations.AddIndex(
            model_name='seedrun',
            index=models.Index(condition=models.Q(('reused_from__isnull', False)), fields=['reused_from'], name='seedrun_reused_from'),
        ),
        migrations.AddIndex(
            model_name='seedrun',
            index=models.Index(condition=models.Q(('judge_token_hash', ''), _negated=True), fields=['judge_token_hash'], name='seedrun_judge_token'),
        ),
        migrations.AddIndex(
            model_name='seedrun',
            index=models.Index(condition=models.Q(('judged_rollout__isnull', False)), fields=['judged_rollout'], name='seedrun_judged_rollout'),
        ),
        migrations.AddConstraint(
            model_name='rolloutattempt',
            constraint=models.UniqueConstraint(fields=('run_id',), name='attempt_unique_run_id'),
        ),
        migrations.AddConstraint(
            model_name='rolloutattempt',
            constraint=models.UniqueConstraint(fields=('token_hash',), name='attempt_unique_token_hash'),
        ),
    ]
