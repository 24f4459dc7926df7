from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0006_job_idempotency_key"),
    ]

    operations = [
        migrations.AddField(
            model_name="evaljob",
            name="rollout_limits",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
