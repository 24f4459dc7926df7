"""Joins the environment kinds, samples (repeats, names), per-rollout limits and the verifier,
which were made side by side from 0006."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0007_task_app_kind"),
        ("jobs", "0008_repeats_and_names"),
        ("jobs", "0009_rollout_limits"),
        ("jobs", "0010_verifier"),
    ]

    operations = []
