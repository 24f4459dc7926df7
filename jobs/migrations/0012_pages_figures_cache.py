import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0011_merge_kinds_samples_limits_verifier"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobFigures",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=32)),
                ("value", models.TextField()),
                ("settled", models.BooleanField(default=False)),
                ("computed_at", models.DateTimeField()),
                ("job", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="jobs.evaljob")),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("job", "name"), name="job_figures_unique_name")],
            },
        ),
    ]
