"""`make bench` is run by hand: a change that breaks a benchmark would be found only by the
next person to measure. The benchmarks that need no peer of their own run here, small."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cpucap():
    """bench/cpucap.py, loaded from its file: the bench folder (`load.py`, ...) stays off the
    suite's sys.path."""
    spec = importlib.util.spec_from_file_location("bench_cpucap", ROOT / "bench" / "cpucap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_big_sample_benchmark_measures_every_figure(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, "bench/bench_big_sample.py", "--calls", "600", "--small", "10",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["calls"] == 600
    assert figures["page_big"]["bytes"] > figures["page_small"]["bytes"] > 0
    # the document streamed is the document built whole, byte for byte in length
    assert figures["document_big"]["bytes"] == figures["document_whole"]["bytes"] > 0
    assert figures["member_big"]["bytes"] > 0  # the zip's member was built
    assert all(f["s"] > 0 for f in figures.values() if isinstance(f, dict))


def test_the_zip_benchmark_reads_the_members_its_workers_kept(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, "bench/bench_traces_zip.py", "--seeds", "200", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["members"]["kept"] == 200  # the "assembled" download reads kept members
    for download in ("build", "assembled", "stored"):
        assert figures[download]["entries"] == 201  # each seed's member and the manifest
    assert all(figures[step]["s"] > 0 for step in ("build", "members", "assembled", "worker"))


def _bench(tmp_path, *args: str) -> dict:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, *args, "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return json.loads(out.read_text())


def test_the_workers_benchmark_runs_its_series_and_counts_their_statements(tmp_path):
    """Uncapped, capped (where this machine allows a cgroup of one's own) and the wall time
    against the direct client, each job whole, with the statements of every worker counted."""
    figures = _bench(
        tmp_path, "bench/bench_workers.py", "--seeds", "60", "--workers", "1", "2",
        "--max-concurrent", "16", "--wall-delay", "0.01", "--worker-cpu", "0.5",
        "--capped-rounds", "1", "--wall-rounds", "2", "--count-queries",
    )  # fmt: skip
    runs = figures["runs"] + figures.get("capped", [])
    assert [r["workers"] for r in figures["runs"]] == [1, 2]
    if _cpucap().why_not() is None:
        assert [r["workers"] for r in figures["capped"]] == [1, 2]
        assert all(r["throttled"] is not None for r in figures["capped"])
    for run in runs:
        assert (run["status"], run["succeeded"]) == ("completed", 60)
        assert run["rollouts_per_s"] > 0 and run["cpu_ms_per_rollout"] > 0
        assert sum(q["per_rollout"] for q in run["queries"].values()) > 0
        assert "COMMIT" in run["queries"]
    wall = figures["wall"]
    assert len(wall["rounds"]) == 2
    assert all(r["direct_s"] > 0 and r["evalhub_wall_s"] > 0 for r in wall["rounds"])
    assert min(r["evalhub_wall_s"] for r in wall["rounds"]) <= wall["evalhub_wall_s"]
    for side in ("direct", "evalhub"):  # the task app's own full collections in each run
        paused = [r[f"{side}_task_app_paused"] for r in wall["rounds"]]
        assert all(len(p) == 2 and p[0] >= 0 and p[1] >= 0 for p in paused), paused


def test_the_summary_benchmark_times_a_summary_of_every_sample(tmp_path):
    figures = _bench(tmp_path, "bench/bench_summary.py", "--samples", "200", "--rounds", "2")
    assert figures["samples"] == 200
    assert 0 < figures["cpu_s_best"] <= figures["cpu_s_median"]
    assert 0 < figures["wall_s_best"] <= figures["wall_s_median"]
