"""The installed `evalhub` executable (.venv-client: the client package alone) against a real
evalhub, web and worker processes, and a real task app: submit and watch, results in each
format, compare, gate in each of its outcomes, plan, and the errors a person can act on."""

from __future__ import annotations

import csv
import io
import json
import re
import signal
import statistics
import subprocess
from pathlib import Path

import pytest
import yaml
from evalhub_client.stats import seeds_needed

from tests.client.conftest import CLIENT_VENV
from tests.support import servers
from tests.support.jobs import FAST, job_body
from tests.support.servers import serve_asgi
from tests.support.task_app import score_of, task_app_create

pytestmark = pytest.mark.worker

SEEDS = list(range(20))


def job_file(tmp_path: Path, url: str, name: str, *, seeds=SEEDS, **overrides) -> Path:
    """The test job's body (tests/support/jobs.py) as a YAML job file, as a person writes one."""
    path = tmp_path / f"{name}.yaml"
    body = job_body(url, seeds=seeds, max_concurrent=4, **overrides)
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def submitted(done) -> str:
    assert done.returncode == 0, (done.stdout, done.stderr)
    return (
        json.loads(done.stdout.splitlines()[0])["job_id"]
        if done.stdout.startswith("{")
        else (done.stdout.split()[1])
    )


def test_submit_watch_and_results_in_each_format(evalhub, worker_factory, tmp_path):
    app, _ = task_app_create(delay_s=0.05)
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        path = job_file(tmp_path, url, "base")
        # A terminal as rich sees one: the live bar is drawn.
        done = evalhub("submit", str(path), "--watch", "--name", "base run", "--tag", "ci",
                       env={"FORCE_COLOR": "1", "TTY_INTERACTIVE": "1"})  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr)
    job_id = submitted(done)
    assert f"/jobs/{job_id}/" in done.stdout  # the dashboard's link
    assert "20/20" in done.stdout and "failed 0" in done.stdout
    mean = statistics.fmean(score_of(s) for s in SEEDS)
    assert f"{mean:.4f}" in done.stdout and "completed" in done.stdout

    rows = json.loads(evalhub("results", job_id, "--format", "json").stdout)
    assert rows["summary"]["mean_score"] == pytest.approx(mean)
    assert {r["seed"]: r["score"] for r in rows["results"]} == {s: score_of(s) for s in SEEDS}

    lines = evalhub("results", job_id, "--format", "jsonl").stdout.splitlines()
    assert [json.loads(line)["seed"] for line in lines] == SEEDS

    table = list(csv.DictReader(io.StringIO(evalhub("results", job_id, "--format", "csv").stdout)))
    assert {int(r["seed"]): float(r["score"]) for r in table} == {s: score_of(s) for s in SEEDS}

    shown = evalhub("results", job_id)  # the table
    assert shown.returncode == 0 and f"{mean:.4f}" in shown.stdout
    assert "seed" in shown.stdout and "succeeded" in shown.stdout
    assert "--limit 0 for all" not in shown.stdout  # 20 rows: under the table's 50
    capped = evalhub("results", job_id, "--limit", "3").stdout
    whole = evalhub("results", job_id, "--limit", "0").stdout
    assert "the first 3 rows; --limit 0 for all" in capped
    # The summary says "succeeded" too: the rows are what the two differ by.
    assert whole.count("succeeded") - capped.count("succeeded") == len(SEEDS) - 3

    status = json.loads(evalhub("status", job_id, "--json").stdout)
    assert status["status"] == "completed" and status["name"] == "base run"
    listed = json.loads(evalhub("--json", "jobs", "--tag", "ci").stdout)["jobs"]
    assert [j["job_id"] for j in listed] == [job_id]

    traces = evalhub("traces", job_id, "-o", str(tmp_path / "traces"))
    assert traces.returncode == 0, traces.stderr
    assert (tmp_path / "traces" / "manifest.json").exists()
    assert (tmp_path / "traces" / "seeds" / "seed_7.json").exists()
    kept = evalhub("traces", job_id, "-o", str(tmp_path / "zip"), "--zip")
    assert kept.returncode == 0 and (tmp_path / "zip" / f"{job_id}-traces.zip").exists()
    exported = evalhub("export", job_id, "--sft", str(tmp_path / "sft.jsonl"), "--json")
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["file"] == str(tmp_path / "sft.jsonl")


def test_watch_shows_the_cost_of_the_llm_calls_so_far(
    evalhub, worker_factory, fake_upstream, celery_queue, tmp_path
):
    """A web process whose interceptor forwards to the fake provider: each rollout makes one
    chat completion, and the bar's cost (then the summary's) is what those calls cost."""
    web, base = servers.start_web(
        OPENAI_BASE_URL=fake_upstream.url,
        OPENAI_API_KEY="sk-fake",
        EVALHUB_CELERY_QUEUE=celery_queue,
    )
    app, _ = task_app_create()
    here = {"EVALHUB_URL": base}
    try:
        with serve_asgi(app) as url:
            worker_factory(EVALHUB_PUBLIC_URL=base, **FAST)
            path = job_file(tmp_path, url, "llm", seeds=[0, 1, 2, 3], env_config={"call_llm": True})
            done = evalhub("submit", str(path), "--watch",
                           env={**here, "FORCE_COLOR": "1", "TTY_INTERACTIVE": "1"})  # fmt: skip
            read = evalhub("results", submitted(done), "--format", "json", env=here)
    finally:
        web.stop()
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert len(fake_upstream.received) == 4
    cost = json.loads(read.stdout)["summary"]["total_cost_usd"]
    assert cost > 0
    shown = re.findall(r"cost \$(\d+\.\d+)", done.stdout)
    assert shown and float(shown[-1]) == pytest.approx(cost, abs=1e-6), done.stdout


def run_job(evalhub, path: Path) -> str:
    """Submit without watching, then follow it with `evalhub watch` (no terminal: plain lines)."""
    done = evalhub("submit", str(path), "--json")
    assert done.returncode == 0, done.stderr
    job_id = json.loads(done.stdout)["job_id"]
    watched = evalhub("watch", job_id)
    assert watched.returncode == 0, (watched.stdout, watched.stderr)
    return job_id


def test_compare_gate_in_each_outcome_and_plan(evalhub, worker_factory, tmp_path):
    worse = {str(s): round(score_of(s) * 0.5, 4) for s in SEEDS}
    app, _ = task_app_create()
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        base = run_job(evalhub, job_file(tmp_path, url, "base"))
        same = run_job(evalhub, job_file(tmp_path, url, "same"))
        lower = run_job(evalhub, job_file(tmp_path, url, "lower", env_config={"scores": worse}))
        few = run_job(evalhub, job_file(tmp_path, url, "few", seeds=[0, 1, 2]))
        hanging = evalhub("submit", str(job_file(tmp_path, url, "hang", env_config={"hang": [0]})))
        running = submitted(hanging)
        still = evalhub("gate", base, running)
        watching = evalhub.start("watch", running)
        assert watching.stdout.readline().startswith(running)  # following: its first line
        watching.send_signal(signal.SIGINT)
        _, interrupted = watching.communicate(timeout=30)
        cancelled = evalhub("cancel", running)

    compared = evalhub("compare", base, lower)
    assert compared.returncode == 0, compared.stderr
    assert "wins / losses / ties" in compared.stdout and "0 / 19 / 1" in compared.stdout
    figures = json.loads(evalhub("compare", base, lower, "--json").stdout)
    assert figures["num_seeds"] == 20 and figures["losses"] == 19  # seed 0 scores 0 in both

    passed = evalhub("gate", base, same, "--markdown", str(tmp_path / "pass.md"))
    assert passed.returncode == 0, (passed.stdout, passed.stderr)
    assert passed.stdout == (tmp_path / "pass.md").read_text()
    verdict = json.loads(evalhub("gate", base, same, "--json").stdout)
    assert (verdict["verdict"], verdict["exit_code"], verdict["shared_seeds"]) == ("pass", 0, 20)
    assert "evalhub gate: ✅ pass" in (tmp_path / "pass.md").read_text()

    failed = evalhub(
        "gate", base, lower, "--max-drop", "0.02", "--markdown", str(tmp_path / "worse.md")
    )
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    # The gate decides on the server's own per-seed differences: the same mean, bounds around it.
    decided = json.loads(evalhub("gate", base, lower, "--json").stdout)
    assert decided["mean_difference"] == figures["mean_difference"]
    assert decided["lower_bound"] < figures["mean_difference"] < decided["upper_bound"] < -0.02
    text = (tmp_path / "worse.md").read_text()

    assert "evalhub gate: ❌ worse" in text and "regressions" not in text.split("| status")[0]

    thin = evalhub("gate", base, few, "--json")
    assert thin.returncode == 2, (thin.stdout, thin.stderr)
    assert (
        json.loads(thin.stdout)["verdict"] == "thin"
        and json.loads(thin.stdout)["shared_seeds"] == 3
    )

    # Pending or running, depending on whether the worker has picked it up yet.
    assert still.returncode == 3 and re.search("is still (pending|running)", still.stderr), (
        still.stderr
    )
    assert len(still.stderr.strip().splitlines()) == 1
    assert cancelled.returncode == 0, cancelled.stderr
    # Ctrl-C while watching: one line saying the job goes on, and how to follow or stop it.
    assert watching.returncode == 130 and "Traceback" not in interrupted, interrupted
    assert interrupted.strip() == (
        f"evalhub: stopped watching; job {running} goes on (`evalhub watch {running}` to follow "
        f"it again, `evalhub cancel {running}` to stop it)"
    )

    planned = evalhub("plan", base, "--effect", "0.1", "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    # No seed ran twice: one row, at the job's one repeat; rho 0.5: sd_d^2 = 2 x 0.5 x V.
    (row,) = plan["rows"]
    sd = statistics.stdev(score_of(s) for s in SEEDS)
    assert row["difference_sd"] == pytest.approx(sd)
    assert row["seeds"] == seeds_needed(effect=0.1, sd=sd, alpha=0.05, power=0.8)
    assert plan["recommended"] == row
    pilot = json.loads(
        evalhub("plan", base, "--effect", "0.1", "--candidate", lower, "--json").stdout
    )
    measured = statistics.stdev(score_of(s) * 0.5 - score_of(s) for s in SEEDS)
    assert pilot["rows"][0]["difference_sd"] == pytest.approx(measured, abs=1e-3)
    shown = evalhub("plan", base, "--effect", "0.1")
    assert (
        shown.returncode == 0 and str(row["seeds"]) in shown.stdout and "paired t" in shown.stdout
    )


def test_rerun_of_the_failed_seeds_and_a_job_that_fails(evalhub, worker_factory, tmp_path):
    app, _ = task_app_create()
    with serve_asgi(app) as url:
        worker_factory(**FAST)
        # Seed 3 fails its first time only: the job completes with one failed sample.
        flaky = job_file(
            tmp_path, url, "flaky", seeds=[0, 1, 2, 3], env_config={"status_first": {"3": 1}}
        )
        first = evalhub("submit", str(flaky), "--watch", "--json")
        again = evalhub(
            "rerun", json.loads(first.stdout.splitlines()[0])["job_id"], "--watch", "--json"
        )
        broken = job_file(tmp_path, url, "broken", seeds=[0, 1, 2, 3], max_failures=1,
                          env_config={"status_always": {"0": 400, "1": 400, "2": 400}})  # fmt: skip
        failed = evalhub("submit", str(broken), "--watch")
    assert first.returncode == 0, first.stderr
    lines = [json.loads(line) for line in first.stdout.splitlines()]
    assert lines[0]["status"] == "pending" and lines[0]["dashboard_url"].endswith("/")
    assert any(e.get("type") == "eval.policy.seed.completed" for e in lines)
    assert lines[-1]["status"] == "completed" and lines[-1]["summary"]["num_failed"] == 1
    assert again.returncode == 0, again.stderr
    rerun = [json.loads(line) for line in again.stdout.splitlines()]
    assert rerun[0]["parent_job_id"] == lines[0]["job_id"]
    assert rerun[-1]["status"] == "completed" and rerun[-1]["summary"]["num_failed"] == 0
    # More samples failed than max_failures allows: the job ends failed, and so does watch.
    assert failed.returncode == 9, (failed.stdout, failed.stderr)
    assert "failed" in failed.stdout


def test_errors_are_one_line_each_with_an_exit_code_of_their_own(evalhub, tmp_path):
    def one_line(done, code: int, *words: str) -> None:
        assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert all(word in done.stderr for word in words), done.stderr

    one_line(evalhub("jobs", env={"EVALHUB_URL": "http://127.0.0.1:9"}), 7, "cannot reach")
    one_line(evalhub("jobs", env={"EVALHUB_API_KEY": "ek_nope"}), 6, "refused the API key")
    one_line(evalhub("jobs", env={"EVALHUB_API_KEY": ""}), 6, "no API key")
    one_line(evalhub("status", "job_does_not_exist"), 4, "job_does_not_exist")
    one_line(evalhub("gate", "nope-1", "nope-2"), 4, "no such job")
    for command in (["watch", "nope"], ["results", "nope", "--format", "csv"],
                    ["traces", "nope", "-o", str(tmp_path / "t")], ["plan", "nope", "--effect", "0.1"],
                    ["export", "nope", "--sft", str(tmp_path / "sft.jsonl")]):  # fmt: skip
        one_line(evalhub(*command), 4, "nope")
    assert not (tmp_path / "sft.jsonl").exists()  # a failed download leaves no file
    assert list((tmp_path / "t").iterdir()) == []

    bad = tmp_path / "bad.yaml"
    bad.write_text("task_app_url: http://127.0.0.1:9\nenv_name: demo\nseeds: [1, two, 3]\n")
    one_line(evalhub("submit", str(bad)), 5, f"{bad}:3", "seeds")
    broken = tmp_path / "broken.yaml"
    broken.write_text("task_app_url: http://127.0.0.1:9\nseeds: [1, 2\npolicy: {}\n")
    one_line(evalhub("submit", str(broken)), 5, "not valid YAML", str(broken))
    not_json = tmp_path / "job.json"
    not_json.write_text('{\n  "task_app_url": "http://127.0.0.1:9",\n  "seeds": [1,]\n}\n')
    one_line(evalhub("submit", str(not_json)), 5, f"{not_json}:3", "not valid JSON")
    nested = tmp_path / "nested.json"
    nested.write_text('{"task_app_url": "ftp://x",\n "seeds": [1]}\n')
    one_line(evalhub("submit", str(nested)), 5, f"{nested}:1", "task_app_url")
    one_line(evalhub("gate", "a"), 64, "Missing argument")
    one_line(evalhub("submit", str(tmp_path / "none.yaml")), 5, "cannot read")


def test_a_field_the_server_does_not_know_is_a_warning_naming_its_line(evalhub, tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("task_app_url: http://127.0.0.1:9\nseeds: [1, 2]\nmax_concurent: 3\n"
                    "verifier_config:\n  enabled: false\n  backend_modle: m\n")  # fmt: skip
    done = evalhub("submit", str(path))
    assert done.returncode == 0, done.stderr  # accepted: clients send fields of their own
    assert done.stderr.splitlines() == [
        f"evalhub: warning: {path}:3: max_concurent: unknown field, not used; did you mean "
        "max_concurrent?",
        f"evalhub: warning: {path}:6: verifier_config.backend_modle: unknown field, not used; "
        "did you mean verifier_config.backend_model?",
    ]
    as_json = evalhub("submit", str(path), "--json")  # stdout stays the job's JSON
    assert [w["field"] for w in json.loads(as_json.stdout)["warnings"]] == [
        "max_concurent", "verifier_config.backend_modle"]  # fmt: skip
    assert len(as_json.stderr.splitlines()) == 2 and "max_concurent" in as_json.stderr
    clean = evalhub("submit", str(job_file(tmp_path, "http://127.0.0.1:9", "clean")))
    assert clean.returncode == 0 and clean.stderr == "", clean.stderr
    for job_id in (submitted(done), json.loads(as_json.stdout)["job_id"], submitted(clean)):
        evalhub("cancel", job_id)


def test_login_saves_the_server_and_key_for_the_next_commands(evalhub, tmp_path):
    done = evalhub("login", "--api-key", evalhub.key, env={"EVALHUB_API_KEY": ""})
    assert done.returncode == 0, done.stderr
    saved = json.loads((tmp_path / "evalhub-config.json").read_text())
    assert saved["api_key"] == evalhub.key
    assert (tmp_path / "evalhub-config.json").stat().st_mode & 0o777 == 0o600
    listed = evalhub("jobs", "--json", env={"EVALHUB_API_KEY": "", "EVALHUB_URL": ""})
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["jobs"] == []
    refused = evalhub("login", "--api-key", "ek_wrong", env={"EVALHUB_API_KEY": ""})
    assert refused.returncode == 6
    assert json.loads((tmp_path / "evalhub-config.json").read_text())["api_key"] == evalhub.key


def test_an_idempotency_key_makes_a_second_submit_return_the_first_job(evalhub, tmp_path):
    path = job_file(tmp_path, "http://127.0.0.1:9", "once")
    first = evalhub("submit", str(path), "--idempotency-key", "pr-12-abc", "--json")
    again = evalhub("submit", str(path), "--idempotency-key", "pr-12-abc", "--json")
    assert first.returncode == 0 and again.returncode == 0, (first.stderr, again.stderr)
    assert json.loads(first.stdout)["job_id"] == json.loads(again.stdout)["job_id"]
    other = evalhub("submit", str(path), "--idempotency-key", "pr-12-abc", "--name", "other")
    assert other.returncode == 5 and "Idempotency-Key" in other.stderr, other.stderr
    evalhub("cancel", json.loads(first.stdout)["job_id"])


def test_the_client_virtualenv_holds_nothing_of_the_server(tmp_path):
    python = CLIENT_VENV / "bin" / "python"
    check = "import importlib.util as u; print([m for m in ('django', 'celery', 'evalhub', 'jobs') if u.find_spec(m)])"
    found = subprocess.run(
        [str(python), "-c", check], capture_output=True, text=True, check=True, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert found.stdout.strip() == "[]"
