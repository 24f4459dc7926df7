"""A replay's job page (docs/replay.md): what it replays, linked, with a comparison to it, and
how its calls were answered."""

from __future__ import annotations

from jobs.models import SeedRun
from tests.frontend.test_numbers_views import run
from tests.frontend.test_views import alice, web  # noqa: F401 - fixtures
from traces.models import CallKind, LLMCall, ReplayMark


def test_a_replays_page_says_what_it_replays_and_how_its_calls_were_answered(web, alice):  # noqa: F811
    original = run(alice, {0: 1.0, 1: 0.5})
    replay = run(alice, {0: 1.0, 1: 0.5}, replay_of_id=original.id, replay_on_miss="fail")
    calls = LLMCall.objects.filter(attempt__seed_run__in=SeedRun.objects.filter(job=replay))
    replayed = calls.filter(attempt__seed_run__seed=0)
    assert replayed.exists()
    replayed.update(
        replay=ReplayMark.REPLAYED, cost_usd=0.0, replayed_cost_usd=0.5 / replayed.count()
    )
    html = web.get(f"/jobs/{replay.id}/").content.decode()
    assert f'Replay of <a class="mono" href="/jobs/{original.id}/">{original.id}</a>' in html
    assert "failing its sample" in html
    assert f"/compare/?base={original.id}&amp;candidate={replay.id}" in html
    assert f"{replayed.count()} call(s) replayed ($0.5 when recorded)" in html
    assert "Replay of" not in web.get(f"/jobs/{original.id}/").content.decode()
    compared = web.get(f"/compare/?base={original.id}&candidate={replay.id}")
    assert compared.status_code == 200 and replay.id in compared.content.decode()


def test_a_replays_verifier_says_how_its_judge_was_answered(web, alice):  # noqa: F811
    original = run(alice, {0: 1.0})
    replay = run(
        alice, {0: 1.0}, replay_of_id=original.id, replay_on_miss="fail",
        verifier_config={"enabled": True},
    )  # fmt: skip
    judge = LLMCall.objects.filter(attempt__seed_run__job=replay).order_by("seq").last()
    judge.pk, judge.seq, judge.kind = None, judge.seq + 1, CallKind.JUDGE
    judge.replay, judge.cost_usd, judge.replayed_cost_usd = ReplayMark.REPLAYED, 0.0, 0.25
    judge.save()
    html = web.get(f"/jobs/{replay.id}/").content.decode()
    assert "1 call(s) replayed ($0.25 when recorded), 0 live, 0 divergence(s)" in html
    assert html.index("data-judge-replayed") > html.index('id="verdicts"')
