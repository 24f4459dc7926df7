"""Commands that read a job's results: results (table, CSV, JSON lines, JSON), traces (the
zip, unpacked or not), export (the passing conversations as SFT JSONL)."""

from __future__ import annotations

import json
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from itertools import islice
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

import click

from evalhub_client.api import Api
from evalhub_client.errors import CliError, Exit
from evalhub_client.output import console, emit_json, json_option, number, state, table
from evalhub_client.progress import summary_show

PAGE = 1000
TABLE_ROWS = 50  # a table on the terminal: more is read with --limit 0, csv or jsonl
ROW_COLUMNS = ("seed", "repeat", "status", "score", "tokens", "cost_usd", "latency_ms", "error")


def result_rows(api: Api, job_id: str) -> Iterator[dict[str, Any]]:
    """The job's result rows a page at a time (memory does not grow with the job)."""
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": PAGE, **({"cursor": cursor} if cursor else {})}
        page = api.call("GET", f"/eval/jobs/{job_id}/results", params=params, what=f"job {job_id}")
        yield from page["results"]
        cursor = page.get("next_cursor")
        if not cursor:
            return


@contextmanager
def written(target: Path) -> Iterator[BinaryIO]:
    """A file written whole or not at all: a failed download leaves nothing behind."""
    partial = target.with_name(f".{target.name}.part")
    try:
        with partial.open("wb") as out:
            yield out
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def _write_stream(api: Api, path: str, output: Path | None, *, what: str) -> int:
    with written(output) if output else nullcontext(sys.stdout.buffer) as out:
        size = api.download(path, out, what=what)
        out.flush()
    return size


@click.command()
@click.argument("job_id")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "jsonl", "json"]),
              default="table", show_default=True)  # fmt: skip
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write to this file.")
@click.option("--limit", type=click.IntRange(min=0), default=TABLE_ROWS, show_default=True,
              help="Rows of the table shown on the terminal; 0 for all.")  # fmt: skip
@json_option
def results(job_id: str, fmt: str, output: Path | None, limit: int) -> None:
    """A job's results: the summary and one row per sample."""
    api = state().api()
    fmt = "json" if state().json and fmt == "table" else fmt
    if fmt == "csv":
        _write_stream(api, f"/eval/jobs/{job_id}/results.csv", output, what=f"job {job_id}")
    elif fmt == "json":
        _write_stream(api, f"/eval/jobs/{job_id}/results", output, what=f"job {job_id}")
    elif fmt == "jsonl":
        with output.open("w") if output else nullcontext(sys.stdout) as out:
            for row in result_rows(api, job_id):
                out.write(json.dumps(row) + "\n")
    else:
        job = api.call("GET", f"/eval/jobs/{job_id}", what=f"job {job_id}")
        summary_show(api, job_id, status=job["status"], as_json=False)
        cap = None if output or not limit else limit
        rows = [[str(r.get("seed")), str(r.get("repeat", 0)), r.get("status", ""),
                 number(r.get("score")), number(r.get("tokens"), "d"), number(r.get("cost_usd"), "$"),
                 number(r.get("latency_ms"), ".0f"), (r.get("error") or "")[:80]]
                for r in _shown(result_rows(api, job_id), cap)]  # fmt: skip
        if output:
            with output.open("w") as out:
                out.write("\n".join("\t".join(row) for row in [list(ROW_COLUMNS), *rows]) + "\n")
            return
        more = bool(limit) and len(rows) > limit
        console.print(table(None, list(ROW_COLUMNS), rows[:limit] if more else rows))
        if more:
            console.print(f"the first {limit} rows; --limit 0 for all, or --format csv|jsonl")


def _shown(rows: Iterator[dict[str, Any]], limit: int | None) -> Iterator[dict[str, Any]]:
    """The rows a table shows, and one more to tell that there are more (pages stop there)."""
    return rows if limit is None else islice(rows, limit + 1)


def zip_unpack(archive: Path, target: Path) -> int:
    """Extract the zip's members under `target`, refusing a name that would land outside it."""
    with zipfile.ZipFile(archive) as zipped:
        for name in zipped.namelist():
            parts = PurePosixPath(name).parts
            if PurePosixPath(name).is_absolute() or ".." in parts:
                raise CliError(f"the traces zip holds an unsafe name: {name!r}", Exit.SERVER)
        zipped.extractall(target)
        return len(zipped.namelist())


@click.command()
@click.argument("job_id")
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path), required=True,
              help="The directory to write into.")  # fmt: skip
@click.option("--zip", "keep_zip", is_flag=True, help="Keep the zip as it is; do not unpack it.")
@json_option
def traces(job_id: str, out_dir: Path, keep_zip: bool) -> None:
    """A job's traces: one JSON document per sample (the zip, unpacked into DIR or not)."""
    api = state().api()
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / f"{job_id}-traces.zip"
    with written(archive) as out:
        size = api.download(f"/eval/jobs/{job_id}/traces", out, what=f"job {job_id}")
    members = None
    if not keep_zip:
        try:
            members = zip_unpack(archive, out_dir)
        except zipfile.BadZipFile:
            raise CliError(
                f"the server's traces of job {job_id} are not a zip", Exit.SERVER
            ) from None
        archive.unlink()
    if state().json:
        emit_json({"job_id": job_id, "directory": str(out_dir), "zip": None if members else str(archive),
                   "bytes": size, "files": members})  # fmt: skip
    elif members is None:
        console.print(f"Wrote {archive} ({size} bytes)")
    else:
        console.print(f"Unpacked {members} files into {out_dir}")


@click.command()
@click.argument("job_id")
@click.option("--sft", "sft_file", type=click.Path(path_type=Path), required=True,
              help="The JSONL file to write: one chat conversation per line.")  # fmt: skip
@click.option("--min-score", type=float, help="Only samples scoring at least this.")
@json_option
def export(job_id: str, sft_file: Path, min_score: float | None) -> None:
    """The passing samples' conversations as chat-format JSONL, for fine-tuning."""
    params = {"min_score": min_score} if min_score is not None else {}
    with written(sft_file) as out:
        state().api().download(f"/eval/jobs/{job_id}/export/sft.jsonl", out,
                               what=f"job {job_id}", params=params)  # fmt: skip
    with sft_file.open("rb") as lines:
        count = sum(1 for line in lines if line.strip())
    if state().json:
        emit_json({"job_id": job_id, "file": str(sft_file), "conversations": count})
    else:
        console.print(f"Wrote {count} conversations to {sft_file}")
