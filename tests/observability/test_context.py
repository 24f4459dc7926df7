"""W3C trace context: the ids derived from a sample, and which traceparent headers count."""

from __future__ import annotations

from traces.otel.context import (
    attempt_traceparent,
    sample_trace_id,
    span_id,
    traceparent_of,
    traceparent_parse,
)


def test_a_samples_ids_are_its_own_and_stable():
    trace = sample_trace_id("job-1", 3, 0)
    assert trace == sample_trace_id("job-1", 3, 0)
    others = {sample_trace_id("job-1", 3, 1), sample_trace_id("job-1", 4, 0),
              sample_trace_id("job-2", 3, 0)}  # fmt: skip
    assert trace not in others and len(others) == 3
    assert 0 < trace < 2**128 and 0 < span_id(trace, "attempt", 1) < 2**64
    header = attempt_traceparent("job-1", 3, 0, 2)
    assert traceparent_parse(header) == (trace, span_id(trace, "attempt", 2))
    assert header.startswith("00-") and header.endswith("-01") and len(header) == 55


def test_only_a_valid_traceparent_is_read():
    good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert traceparent_of([(b"x-other", b"1"), (b"traceparent", good.upper().encode())]) == good
    for bad in ("", "garbage", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                good + "-extra"):  # fmt: skip
        assert traceparent_of([(b"traceparent", bad.encode())]) == ""
    assert traceparent_of([]) == ""
