"""What the commands print: JSON for scripts (`--json`), rich tables for people; the state
every command shares (the server, the key, the output mode)."""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass, field
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from evalhub_client.api import Api
from evalhub_client.config import config_load

console = Console()


@dataclass
class State:
    url: str | None = None
    api_key: str | None = None
    json: bool = False
    _api: Api | None = field(default=None, repr=False)

    def api(self) -> Api:
        if self._api is None:
            self._api = Api(config_load(url=self.url, api_key=self.api_key))
        return self._api


def say(message: str) -> None:
    """One line on stderr, beside the command's output (`--json` too: stdout stays the command's
    JSON): an error as the command ends, or a warning."""
    sys.stderr.write(f"evalhub: {' '.join(message.split())}\n")


def warn(message: str) -> None:
    say(f"warning: {message}")


def state() -> State:
    return click.get_current_context().find_object(State)


def json_option(command):
    """`--json` on a command (also accepted before it: `evalhub --json status ID`)."""

    @click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
    @functools.wraps(command)
    def wrapped(*args, as_json: bool, **kwargs):
        if as_json:
            state().json = True
        return command(*args, **kwargs)

    return wrapped


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def number(value: Any, spec: str = ".3f") -> str:
    if value is None:
        return "–"
    if spec == "$":
        return money(value)
    if isinstance(value, list | tuple) and len(value) == 2 and None not in value:
        return f"[{value[0]:{spec}}, {value[1]:{spec}}]"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    try:
        return f"{value:{spec}}"
    except ValueError:  # a float where a count was expected
        return f"{value:g}"


def money(value: float | None) -> str:
    """US dollars: four decimals, six under a cent (a sample's calls often cost less)."""
    if value is None:
        return "–"
    return f"{value:.4f}" if abs(value) >= 0.01 or value == 0 else f"{value:.6f}"


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> Table:
    out = Table(title=title, title_justify="left", show_edge=False)
    for column in columns:
        out.add_column(column, overflow="fold")
    for row in rows:
        out.add_row(*[r if isinstance(r, str) else number(r) for r in row])
    return out


def job_line(job: dict[str, Any]) -> str:
    progress = job.get("results") or {}
    return (f"{job['job_id']}  {job.get('status')}  {progress.get('completed', 0)}/"
            f"{progress.get('total', '?')} samples")  # fmt: skip
