from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0006_job_idempotency_key'),
    ]

    operations = [
        migrations.AddField(
            model_name='evaljob',
            name='task_app_kind',
            field=models.CharField(default='synth', max_length=16),
        ),
    ]
