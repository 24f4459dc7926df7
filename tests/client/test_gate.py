"""The gate's decision and its Markdown, the job file's lines, the event stream's parsing:
the client's pure parts, on hand-made inputs (test_cli.py runs them against a real server)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from evalhub_client.api import sse_parse
from evalhub_client.errors import CliError, Exit
from evalhub_client.gate import gate_decide, gate_markdown, jobs_over
from evalhub_client.jobfile import first_field_error, job_file_read
from evalhub_client.stats import t_quantile


def compare_of(deltas: list[float], status: str = "completed") -> dict:
    """A body of GET /api/eval/compare with these per-seed differences."""
    side = {"job_id": "b", "name": "", "status": status, "mean_score": 0.5}
    return {
        "base": side, "candidate": {**side, "job_id": "c", "name": "new prompt"},
        "num_seeds": len(deltas), "wins": sum(d > 0 for d in deltas),
        "losses": sum(d < 0 for d in deltas), "ties": sum(d == 0 for d in deltas),
        "mean_difference": sum(deltas) / len(deltas) if deltas else None,
        "mean_difference_ci95": None, "p_value": None, "test": "sign-flip",
        "regressions": [3, 9], "seeds": [{"seed": i, "delta": d} for i, d in enumerate(deltas)],
    }  # fmt: skip


def decide(deltas: list[float], **options):
    return gate_decide(compare_of(deltas), **{"max_drop": 0.02, "alpha": 0.05, "min_seeds": 10,
                                              **options})  # fmt: skip


def test_a_candidate_no_worse_than_the_allowed_drop_passes():
    # 20 seeds, differences alternating +0.01 / -0.03: mean -0.01, sd 0.02052;
    # lower bound -0.01 - t(0.95; 19) 0.02052 / sqrt(20) = -0.01 - 0.00793 = -0.01793 > -0.02.
    verdict = decide([0.01, -0.03] * 10)
    assert verdict.code == Exit.OK
    assert verdict.bounds.lower == pytest.approx(
        -0.01 - t_quantile(0.95, 19) * 0.0205196 / math.sqrt(20), abs=1e-6
    )
    assert verdict.bounds.lower > -0.02


def test_a_candidate_surely_worse_by_more_than_the_drop_fails():
    verdict = decide([-0.05, -0.07] * 10)
    assert verdict.code == Exit.WORSE and verdict.bounds.upper < -0.02


def test_too_few_shared_seeds_or_an_interval_holding_the_margin_is_too_thin():
    few = decide([0.0, 0.0, 0.0])
    assert few.code == Exit.THIN and "3 shared seeds" in few.reason
    # Mean -0.02 exactly: no number of seeds can settle it.
    undecided = decide([0.08, -0.12] * 10)
    assert undecided.code == Exit.THIN and undecided.seeds_to_settle is None
    # Mean 0, sd 0.1: the lower bound passes -0.02 once t s / sqrt(n) < 0.02, about 70 seeds.
    wide = decide([0.1, -0.1] * 10)
    assert wide.code == Exit.THIN and wide.bounds.lower < -0.02 < wide.bounds.upper
    assert 60 <= wide.seeds_to_settle <= 80
    assert decide([0.1, -0.1] * (wide.seeds_to_settle // 2 + 1)).code == Exit.OK
    # A stricter alpha needs more: the same differences at 0.01 are thinner.
    assert decide([0.01, -0.03] * 10, alpha=0.01).code == Exit.THIN
    assert decide([0.0] * 5, min_seeds=5).code == Exit.OK


def test_a_job_still_running_is_an_error_of_its_own():
    with pytest.raises(CliError) as raised:
        jobs_over(compare_of([0.0] * 10, status="running"))
    assert raised.value.code == Exit.RUNNING and "still running" in raised.value.message


def test_the_markdown_says_the_verdict_the_figures_and_the_regressions():
    body = compare_of([-0.05, -0.07] * 10)
    text = gate_markdown(body, gate_decide(body, max_drop=0.02, alpha=0.05, min_seeds=10),
                         max_drop=0.02, alpha=0.05, url="https://evalhub.example")  # fmt: skip
    assert text.startswith("### evalhub gate: ❌ worse\n")
    assert "Candidate `new prompt` (c) against base `b`" in text
    assert "| mean score | 0.500 | 0.500 |" in text
    assert "seeds 3, 9" in text and "one-sided 95% bounds" in text
    assert "https://evalhub.example/compare/?base=b&candidate=c" in text


def test_a_job_files_fields_are_found_on_their_lines(tmp_path: Path):
    path = tmp_path / "job.yaml"
    path.write_text(
        "task_app_url: http://x\nseeds: [1, 2]\npolicy:\n  model: m\n  temperature: hot\n"
    )
    job = job_file_read(path)
    assert job.line_of(["seeds"]) == 2 and job.line_of(["policy", "temperature"]) == 5
    assert job.line_of(["policy", "absent"]) == 3 and job.line_of(["absent"]) is None
    assert first_field_error({"policy": {"temperature": ["must be a number"]}}) == (
        ["policy", "temperature"], "must be a number"
    )  # fmt: skip
    dated = tmp_path / "dated.yaml"
    dated.write_text("seeds: [1]\nmetadata:\n  run: nightly\n  day: 2024-05-01\n")
    with pytest.raises(CliError) as raised:
        job_file_read(dated)
    assert raised.value.message == (
        f"{dated}:4: metadata.day: 2024-05-01 is a date, not JSON: put it in quotes"
    )
    as_json = tmp_path / "job.json"
    as_json.write_text('{\n  "task_app_url": "http://x",\n  "seeds": [1]\n}\n')
    assert job_file_read(as_json).line_of(["seeds"]) == 3


def test_server_sent_events_are_parsed_with_their_ids_and_types():
    lines = ["retry: 2000", "", ": keep-alive", "", "id: 4", "event: eval.policy.seed.completed",
             'data: {"seq": 4, "data": {"seed": 1, "completed": 2}}', "",
             "event: sse.stream.ended", 'data: {"type": "sse.stream.ended"}', ""]  # fmt: skip
    events = list(sse_parse(iter(lines)))
    assert [(e.seq, e.type) for e in events] == [
        (4, "eval.policy.seed.completed"), (None, "sse.stream.ended")
    ]  # fmt: skip
    assert events[0].data == {"seed": 1, "completed": 2}


def test_a_candidate_exactly_at_the_allowed_drop_passes_about_alpha_of_the_time():
    """The gate's error rate, simulated: differences drawn around -max_drop itself (a candidate
    that is worse by exactly what is allowed) pass in about alpha of the runs, and a candidate
    worse by three times as much is almost always caught as worse, never passed."""
    rng = random.Random(5)
    outcomes = [decide([rng.gauss(-0.02, 0.1) for _ in range(40)]).code for _ in range(3000)]
    # 3000 runs: the rate's standard error is 0.004.
    assert abs(outcomes.count(Exit.OK) / 3000 - 0.05) < 0.015
    worse = [decide([rng.gauss(-0.06, 0.05) for _ in range(40)]).code for _ in range(500)]
    assert worse.count(Exit.OK) == 0 and worse.count(Exit.WORSE) / 500 > 0.95
