"""`make bench` is run by hand: a change that breaks a benchmark would be found only by the
next person to measure. The benchmarks that need no peer of their own run here, small."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
