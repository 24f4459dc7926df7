"""Formatting for the dashboard's figures. A missing value is shown as an em dash, an unknown
cost as "unknown" (never as $0)."""

from __future__ import annotations

from django import template

from jobs.events import EventType

register = template.Library()

DASH = "—"


@register.filter
def score(value: float | None) -> str:
    return DASH if value is None else f"{value:.3f}"


@register.filter
def usd(value: float | None) -> str:
    if value is None:
        return "unknown"
    if value == 0:
        return "$0"
    return f"${value:.4f}" if value >= 0.01 else f"${value:.6f}"


@register.filter
def tokens(value: int | None) -> str:
    if value is None:
        return DASH
    if value >= 1_000_000:
        return f"{value / 1_000_000:.2f}M"
    if value >= 10_000:
        return f"{value / 1000:.1f}k"
    return f"{value:,}"


@register.filter
def ms(value: float | None) -> str:
    if value is None:
        return DASH
    if value < 1000:
        return f"{value:.0f} ms"
    return f"{value / 1000:.2f} s" if value < 10_000 else f"{value / 1000:.1f} s"


@register.filter
def duration(seconds: float | None) -> str:
    if seconds is None:
        return DASH
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


@register.filter
def get(mapping: dict, key: str):
    return mapping.get(key) if isinstance(mapping, dict) else None


@register.simple_tag(takes_context=True)
def sort_link(context, key: str) -> str:
    """The query string that sorts the seed table by `key`, flipping the direction when the
    table is already sorted by it; filters are kept, the page is reset."""
    query = context["request"].GET.copy()
    query.pop("page", None)
    current, descending = context["sort"], context["descending"]
    query["sort"] = f"-{key}" if key == current and not descending else key
    return "?" + query.urlencode()


@register.filter
def percent(value: float | None) -> str:
    """A share as a percentage: 0.4567 -> 45.7%."""
    return DASH if value is None else f"{100 * value:.1f}%"


@register.filter
def signed(value: float | None) -> str:
    """A difference with its sign: +0.250, −0.100, 0.000."""
    if value is None:
        return DASH
    if abs(value) < 1e-12:
        return "0.000"
    return f"+{value:.3f}" if value > 0 else f"−{-value:.3f}"


@register.simple_tag
def event_types() -> str:
    """The job event types, for the pages' event-stream listeners (EventSource hears only the
    event names it listens for)."""
    return ",".join(EventType.values)
