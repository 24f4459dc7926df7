"""A job file (JSON or YAML, the body of `POST /api/eval/jobs`): read, and when the file or
the server finds something wrong in it, the field and the line it is on."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalhub_client.errors import CliError, Exit


@dataclass(frozen=True)
class JobFile:
    path: Path
    text: str
    body: dict[str, Any]

    def line_of(self, field: list[str]) -> int | None:
        """The 1-based line where the field (a path of keys) is, or None if it is not there."""
        try:
            node = yaml.compose(self.text)
        except yaml.YAMLError:
            return None
        line = None
        for name in field:
            if not isinstance(node, yaml.MappingNode):
                break
            found = [(k, v) for k, v in node.value if getattr(k, "value", None) == name]
            if not found:
                break
            key, node = found[0]
            line = key.start_mark.line + 1
        return line

    def where(self, field: list[str]) -> str:
        line = self.line_of(field)
        return f"{self.path}:{line}" if line else str(self.path)

    def warnings_said(self, warnings: list[dict[str, Any]]) -> list[str]:
        """The server's `warnings` (fields it did not know, so did not use) as lines naming
        the file and the line each field is on: `job.yaml:4: max_concurent: unknown field,
        not used; did you mean max_concurrent?`."""
        said = []
        for warning in warnings:
            if not isinstance(warning, dict) or not warning.get("field"):
                continue
            field = str(warning["field"])
            said.append(f"{self.where(field.split('.'))}: {field}: {warning.get('message', '')}")
        return said


def job_file_read(path: Path) -> JobFile:
    try:
        text = path.read_text()
    except OSError as exc:
        raise CliError(f"{path}: cannot read it ({exc.strerror or exc})", Exit.INVALID) from None
    if path.suffix.lower() == ".json":
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CliError(
                f"{path}:{exc.lineno}: not valid JSON: {exc.msg}", Exit.INVALID
            ) from None
    else:
        try:
            body = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark else str(path)
            problem = getattr(exc, "problem", None) or str(exc)
            raise CliError(f"{where}: not valid YAML: {problem}", Exit.INVALID) from None
    if not isinstance(body, dict):
        raise CliError(f"{path}: a job file is an object of fields (task_app_url, seeds, ...)",
                       Exit.INVALID)  # fmt: skip
    job = JobFile(path=path, text=text, body=body)
    _json_only(job, body, [])
    return job


def _json_only(job: JobFile, value: Any, field: list[str]) -> None:
    """YAML reads `2024-05-01` as a date and `12:30` as a number of its own: only what JSON
    can say is sent, and anything else is named with its line."""
    if isinstance(value, dict):
        for name, item in value.items():
            _json_only(job, item, [*field, str(name)])
    elif isinstance(value, list):
        for item in value:
            _json_only(job, item, field)
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise CliError(f"{job.where(field)}: {'.'.join(field)}: {value!s} is a "
                       f"{type(value).__name__}, not JSON: put it in quotes", Exit.INVALID)  # fmt: skip


def first_field_error(fields: dict[str, Any]) -> tuple[list[str], str]:
    """The first offending field of an API error's `fields` (nested for objects) and its message."""
    path: list[str] = []
    value: Any = fields
    while isinstance(value, dict) and value:
        name, value = next(iter(value.items()))
        path.append(str(name))
    while isinstance(value, list) and value:
        value = value[0]
    return path, str(value)
