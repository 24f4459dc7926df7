from __future__ import annotations

from django.contrib.auth import get_user_model

from jobs import services
from jobs.models import SeedRun
from jobs.selectors import seed_run_pages


def test_seed_run_pages_walk_seeds_and_repeats_in_order_from_a_key(db):
    owner = get_user_model().objects.create(username="owner")
    spec = services.JobSpec(task_app_url="http://127.0.0.1:9", seeds=[3, 1, 2], repeats=2)
    runs = SeedRun.objects.filter(job=services.job_create(owner=owner, spec=spec))

    def keys(pages):
        return [[(r.seed, r.repeat) for r in page] for page in pages]

    assert keys(seed_run_pages(runs, size=4)) == [
        [(1, 0), (1, 1), (2, 0), (2, 1)], [(3, 0), (3, 1)],
    ]  # fmt: skip
    assert keys(seed_run_pages(runs, size=2, after=(1, 1), limit=3)) == [
        [(2, 0), (2, 1)], [(3, 0)],
    ]  # fmt: skip
    assert keys(seed_run_pages(runs, size=3, after=(3, 1))) == []
