"""Labels are made by hand: retention's pruning of traces and a rerun leave them where they
were made; deleting a job (the admin) asks first and says how many labels go with it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from jobs.labels import LabelChange, label_save
from jobs.models import EvalJob, SampleLabel, Verdict
from jobs.reruns import job_rerun
from tests.jobs.test_numbers_api import alice, finished_job  # noqa: F401 (a fixture)
from traces.calls import reuse
from traces.retention import traces_prune

pytestmark = pytest.mark.django_db


def labelled_job(owner):
    job = finished_job(owner, {0: 1.0, 1: None, 2: 0.5})
    for run in job.seed_runs.filter(seed__in=[0, 2]):
        label_save(seed_run=run, author=owner, change=LabelChange(verdict=Verdict.PASS))
    return job


def test_pruning_the_traces_and_rerunning_keep_every_label(alice):  # noqa: F811
    job = labelled_job(alice)
    EvalJob.objects.filter(pk=job.pk).update(completed_at=timezone.now() - timedelta(days=40))
    report = traces_prune(older_than_days=30)
    assert report.jobs == 1 and report.llm_calls > 0
    child = job_rerun(
        parent=job, seeds="all", policy=None, copy_attempt_children=reuse.llm_calls_copy
    )
    again = job_rerun(
        parent=job, seeds="failed", policy=None, copy_attempt_children=reuse.llm_calls_copy
    )
    assert child.seed_runs.count() == again.seed_runs.count() == 3
    assert sorted(SampleLabel.objects.values_list("seed_run__job_id", "seed_run__seed")) == [
        (job.id, 0), (job.id, 2)
    ]  # fmt: skip


def test_deleting_a_job_in_the_admin_asks_and_says_how_many_labels_go(alice, django_user_model):  # noqa: F811
    job = labelled_job(alice)
    admin = django_user_model.objects.create_superuser(username="root", password="pw-12345678")
    client = Client()
    client.force_login(admin)
    page = client.get(f"/admin/jobs/evaljob/{job.id}/delete/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "2 label(s) people made by hand" in html and "Are you sure" in html
    assert SampleLabel.objects.count() == 2  # asking deleted nothing
    client.post(f"/admin/jobs/evaljob/{job.id}/delete/", {"post": "yes"})
    assert not EvalJob.objects.filter(pk=job.pk).exists() and not SampleLabel.objects.exists()
