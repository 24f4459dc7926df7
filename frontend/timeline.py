"""A sample's time line on the seed page: each attempt's LLM calls and tool executions on one
time axis, from the attempt's start to its end, so when each ran, what overlapped and how the
time split between the model, the tools and everything else (the task app, the network) can be
read at a glance.

An LLM call is placed where it started (`LLMCall.started_at`) for its latency, its time to the
first token marked. The environments report how long a tool ran, not when it started: a tool
is placed right after the call that asked for it (matched by the tool call's id, else by step),
the tools of one answer one after another. Drawn server-side: each lane an SVG whose
x-axis stretches with the page (`preserveAspectRatio="none"`), its labels in HTML, so it reads
the same on a phone."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from frontend.selectors import AttemptView

ROW_PX = 14  # the height of one row of a lane
WIDTH = 1000  # the SVG's x-axis: per mille of the attempt's time
NICE_STEPS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000,
                 60_000, 120_000, 300_000, 600_000, 1_800_000, 3_600_000)  # fmt: skip


@dataclass
class Span:
    start_ms: float
    end_ms: float
    title: str
    href: str = ""
    failed: bool = False
    first_token_ms: float | None = None  # from the start, for a call that streamed
    row: int = 0
    y: int = 0
    x: float = 0.0
    width: float = 0.0
    ttft_width: float = 0.0


@dataclass
class Lane:
    key: str  # "model" or "tools"
    name: str
    spans: list[Span] = field(default_factory=list)
    rows: int = 1

    @property
    def height(self) -> int:
        return self.rows * ROW_PX


@dataclass
class Timeline:
    attempt: int
    total_ms: float
    lanes: list[Lane]
    ticks: list[tuple[float, str, str]]  # (percent of the width, label, its alignment)
    model_ms: float
    tool_ms: float
    other_ms: float


def _ms(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds() * 1000


def _calls(view: AttemptView, origin: datetime) -> list[Span]:
    spans = []
    for step in view.steps:
        call = step.call
        start = _ms(call.started_at, origin)
        model = call.model_answered or call.model_requested or "?"
        latency = call.latency_ms or 0.0
        title = f"call {call.seq} · {model} · {latency:.0f} ms"
        if call.ttft_ms:
            title += f" (first token {call.ttft_ms:.0f} ms)"
        failed = bool(call.error) or (call.http_status or 200) >= 400
        spans.append(Span(start, start + latency, title + (" · failed" if failed else ""),
                          href=f"#call-{view.attempt.number}-{call.seq}", failed=failed,
                          first_token_ms=start + call.ttft_ms if call.ttft_ms else None))  # fmt: skip
    return spans


def _tools(view: AttemptView, executions: list[dict[str, Any]], calls: list[Span]) -> list[Span]:
    """Each tool after the call whose answer asked for it, one after another."""
    asked_by: dict[str, int] = {}  # tool call id -> index of the call that asked for it
    for i, step in enumerate(view.steps):
        for message in step.answer:
            for tool_call in message.tool_calls:
                asked_by[tool_call.id] = i
    cursor: dict[int, float] = {}
    spans = []
    for e in executions:
        i = asked_by.get(str(e.get("call_id") or ""), int(e.get("step") or 1) - 1)
        if not calls or not 0 <= i < len(calls):
            continue
        start = cursor.get(i, calls[i].end_ms)
        duration = float(e.get("duration_ms") or 0.0)
        cursor[i] = start + duration
        title = f"{e.get('name') or 'tool'} · {duration:.0f} ms" + (
            " · error" if e.get("error") else ""
        )
        spans.append(Span(start, start + duration, title, failed=bool(e.get("error"))))
    return spans


def _rows(spans: list[Span]) -> int:
    """Overlapping spans on rows of their own (the first row free when each starts)."""
    ends: list[float] = []
    for span in sorted(spans, key=lambda s: s.start_ms):
        free = next((r for r, end in enumerate(ends) if end <= span.start_ms), None)
        if free is None:
            ends.append(span.end_ms)
            free = len(ends) - 1
        ends[free] = span.end_ms
        span.row = free
    return max(1, len(ends))


def _covered(spans: list[Span]) -> float:
    """The time at least one of the spans ran (overlaps counted once)."""
    total, reach = 0.0, float("-inf")
    for span in sorted(spans, key=lambda s: s.start_ms):
        start = max(span.start_ms, reach)
        if span.end_ms > start:
            total += span.end_ms - start
        reach = max(reach, span.end_ms)
    return total


def _ticks(total_ms: float) -> list[tuple[float, str, str]]:
    step = next((s for s in NICE_STEPS_MS if total_ms / s <= 5), NICE_STEPS_MS[-1])
    ticks, at = [], 0.0
    while at <= total_ms:
        label = f"{at / 1000:g} s" if at >= 1000 or at == 0 else f"{at:.0f} ms"
        left = round(100 * at / total_ms, 2)
        align = "start" if at == 0 else ("end" if left > 90 else "middle")
        ticks.append((left, label, align))
        at += step
    return ticks


def attempt_timeline(view: AttemptView, executions: list[dict[str, Any]]) -> Timeline | None:
    """The attempt's time line, or None when it recorded no call and ran no tool."""
    attempt = view.attempt
    if not view.steps and not executions:
        return None
    starts = [attempt.started_at] + [s.call.started_at for s in view.steps]
    origin = min(starts)
    calls = _calls(view, origin)
    tools = _tools(view, executions, calls)
    ends = [s.end_ms for s in calls + tools]
    if attempt.finished_at:
        ends.append(_ms(attempt.finished_at, origin))
    total = max(ends + [1.0])
    lanes = [Lane("model", "Model", calls, _rows(calls))]
    if tools:
        lanes.append(Lane("tools", "Tools", tools, _rows(tools)))
    for span in calls + tools:
        span.y = span.row * ROW_PX + 2
        span.x = round(WIDTH * span.start_ms / total, 2)
        span.width = round(max(WIDTH * (span.end_ms - span.start_ms) / total, 2.0), 2)
        if span.first_token_ms is not None:
            span.ttft_width = round(WIDTH * (span.first_token_ms - span.start_ms) / total, 2)
    model, tool = _covered(calls), _covered(tools)
    return Timeline(attempt=attempt.number, total_ms=total, lanes=lanes, ticks=_ticks(total),
                    model_ms=model, tool_ms=tool,
                    other_ms=max(0.0, total - _covered(calls + tools)))  # fmt: skip


def seed_timelines(attempts: list[AttemptView], executions: list[dict[str, Any]]) -> dict:
    """Attempt number -> its time line. The tools are those of the seed's trace, which the
    last attempt returned."""
    found = {}
    for view in attempts:
        tools = executions if view is attempts[-1] else []
        timeline = attempt_timeline(view, tools)
        if timeline is not None:
            found[view.attempt.number] = timeline
    return found
