from django.db import migrations, models
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce


def num_samples_fill(apps, schema_editor):
    """Each existing job's samples are its seed runs (a re-judgement has one per rollout it
    judges, whatever its `repeats`)."""
    EvalJob = apps.get_model("jobs", "EvalJob")
    SeedRun = apps.get_model("jobs", "SeedRun")
    counts = (
        SeedRun.objects.filter(job_id=OuterRef("pk"))
        .order_by()
        .values("job_id")
        .annotate(n=Count("id"))
        .values("n")
    )
    EvalJob.objects.update(num_samples=Coalesce(Subquery(counts), 0))


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0017_drop_runner_wait'),
    ]

    operations = [
        migrations.AddField(
            model_name='evaljob',
            name='num_samples',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(num_samples_fill, migrations.RunPython.noop, elidable=True),
    ]
