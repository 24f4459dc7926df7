from django.db import migrations


class Migration(migrations.Migration):
    """Runners no longer share a job by fair shares: RunnerWait is gone (jobs/worker/runner.py)."""

    dependencies = [
        ("jobs", "0016_runner_wait"),
    ]

    operations = [
        migrations.DeleteModel(name="RunnerWait"),
    ]
