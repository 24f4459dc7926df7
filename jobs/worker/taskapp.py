"""The task-app client: the health probe and `POST /rollout`, and reading the answer.

Task apps are user code, so nothing in a RolloutResponse is trusted: a body that is not JSON, a
field of the wrong type or no reward object becomes a `TaskAppError` (jobs.worker.episode, what
every kind of environment ends in) with a readable message, which says whether trying again
could help (`transient`: connection failures, timeouts to connect, 429 and 5xx answers). The
reward object is `reward_info` (synth-ai 0.5.0 and later) or `metrics` (0.4.x):
`outcome_reward`, maybe `outcome_objectives`, `event_rewards`, `details`.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import httpx
import orjson
from django.conf import settings

from evalhub import jsonvalues
from jobs.fields import json_value_problem, url_shown
from jobs.figures import JsonText
from jobs.models import CONNECTION_ERROR_PREFIX
from jobs.scores import Scores
from jobs.worker.answer_budget import SMALL_BYTES, AnswerHold, answer_cost
from jobs.worker.episode import (
    BUSY_RETRY_MAX_S,
    MAX_ANSWER_DEPTH,
    EnvironmentBusy,
    RolloutOutcome,
    TaskAppError,
    TaskAppUnreachable,
)

# How much of a task app's error body is kept in an error message.
BODY_EXCERPT = 300


def retry_after_seconds(value: str | None) -> float | None:
    """A `Retry-After` header's delay in seconds (delta-seconds or an HTTP date), bounded;
    None when absent or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds()
        except (TypeError, ValueError):
            return None
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), BUSY_RETRY_MAX_S)


# Answer fields kept beside the reward object (synth-ai 0.5.0+): the rollout's infrastructure
# status, its free-form detail, and what the rollout produced.
ANSWER_EXTRAS = ("success_status", "status_detail", "artifact")
# The reward object's fields read as numbers, and those of them a score is taken from, in order
# (`outcome_objectives.reward` comes second: a task app reporting only objectives is scored).
NUMBER_FIELDS = ("outcome_reward", "outcome_score", "reward_mean", "events_score")


def headers_for(api_key: str | None) -> dict[str, str]:
    """The key goes in the three places task apps look for it."""
    if not api_key:
        return {}
    return {"X-API-Key": api_key, "Authorization": f"Bearer {api_key}", "X-API-Keys": api_key}


def rollout_request_build(
    *,
    run_id: str,
    seed: int,
    env_name: str | None,
    env_config: dict[str, Any],
    policy: dict[str, Any],
    inference_url: str,
    trace_correlation_id: str,
    mode: str,
    timeout_s: float,
) -> dict[str, Any]:
    """A RolloutRequest as the contract describes it."""
    policy_config = dict(policy)
    policy_config["inference_url"] = inference_url
    policy_config["trace_correlation_id"] = trace_correlation_id
    return {
        "run_id": run_id,
        # synth-ai 0.4.12+ task apps require it at the top level, 0.4.4 reads it from the policy.
        "trace_correlation_id": trace_correlation_id,
        "env": {"env_name": env_name, "config": env_config, "seed": seed},
        "policy": {"policy_name": policy.get("policy_name"), "config": policy_config},
        "record": {
            "trajectories": True,
            "logprobs": False,
            "value": False,
            "return_trace": True,
            "trace_format": "compact",
        },
        "on_done": "reset",
        "safety": {"max_time_s": timeout_s},
        "mode": mode,
    }


async def task_app_probe(
    client: httpx.AsyncClient,
    *,
    base_url: str,
    api_key: str | None,
    tries: int = 2,
    timeout_s: float = 10.0,
) -> str | None:
    """`GET /health`. None when the task app answered anything at all (even a 404: it is
    there); otherwise why no connection could be made."""
    error = "no attempt"
    for _ in range(tries):
        try:
            await client.get(f"{base_url}/health", headers=headers_for(api_key), timeout=timeout_s)
            return None
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            error = _describe(exc)
        except httpx.HTTPError:
            return None  # connected, then slow or rude: it is there
    return f"{CONNECTION_ERROR_PREFIX} at {url_shown(base_url)}: {error}"


async def rollout_post(
    session: aiohttp.ClientSession,
    *,
    base_url: str,
    api_key: str | None,
    body: dict[str, Any],
    hold: AnswerHold,
    traceparent: str = "",
) -> RolloutOutcome:
    """POST the rollout (with the sample's W3C `traceparent`) and read at most
    EVALHUB_MAX_ROLLOUT_RESPONSE_BYTES of the answer, holding its share of the worker's answer
    budget in `hold` (released by the caller once the result is written); the caller enforces
    the time limit."""
    limit = settings.EVALHUB_MAX_ROLLOUT_RESPONSE_BYTES
    trace = {"traceparent": traceparent} if traceparent else {}
    headers = {**headers_for(api_key), "Content-Type": "application/json", **trace}
    try:
        async with session.post(
            f"{base_url}/rollout", data=_json_bytes(body), headers=headers
        ) as response:
            status, content = response.status, await _read_bounded(response, limit, hold)
            retry_after = retry_after_seconds(response.headers.get("Retry-After"))
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
        raise TaskAppUnreachable(f"{CONNECTION_ERROR_PREFIX}: {_describe(exc)}") from None
    except aiohttp.ClientError as exc:
        raise _broken(exc) from None
    if content is None:
        raise TaskAppError(
            f"task app answered more than {limit} bytes (EVALHUB_MAX_ROLLOUT_RESPONSE_BYTES)",
            transient=False,
            http_status=status,
        )
    if status in (429, 503) and retry_after is not None:
        raise EnvironmentBusy(
            f"task app answered HTTP {status} with Retry-After: {_excerpt(content)}",
            retry_after_s=retry_after, http_status=status,
        )  # fmt: skip
    size = len(content)
    outcome = _storable(rollout_response_parse(status_code=status, content=content))
    del content  # its bytes are freed before the JSON text is made in their place
    return outcome if size < SMALL_BYTES else kept_as_text(outcome, hold)


def _json_bytes(body: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(body)
    except (orjson.JSONEncodeError, TypeError):  # e.g. an integer beyond 64 bits in env_config
        return json.dumps(body).encode()


async def _read_bounded(response: aiohttp.ClientResponse, limit: int, hold) -> bytes | None:
    """The body, or None as soon as it is known to be over `limit` bytes. A big body is read
    once its share of the answer budget is free: its length's, or the limit's when the task
    app did not say (given back once the length is known)."""
    declared = response.content_length
    if charged := declared is not None:
        if declared > limit:
            return None
        await hold.take(declared)
    chunks, size = [], 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        if not charged and size >= SMALL_BYTES:
            await hold.take(limit)
            charged = True
        chunks.append(chunk)
    content = b"".join(chunks)
    hold.resize(answer_cost(len(content)))
    return content


def kept_as_text(outcome: RolloutOutcome, hold: AnswerHold) -> RolloutOutcome:
    """The outcome with its metrics and trace as the JSON text written to the database when
    they are big, made at once so that their decoded form (about twice the text) is freed
    before the next `await`; `hold` is charged what is kept from now on."""
    metrics = _json_bytes(outcome.metrics).decode()
    trace = None if outcome.trace is None else _json_bytes(outcome.trace).decode()
    if len(metrics) + len(trace or "") < SMALL_BYTES:
        hold.resize(answer_cost(len(metrics) + len(trace or "")))
        return outcome
    hold.resize(answer_cost(sys.getsizeof(metrics) + sys.getsizeof(trace)))
    text = None if trace is None else JsonText(trace)
    return replace(outcome, metrics=JsonText(metrics), trace=text)


def _broken(exc: Exception) -> TaskAppError:
    # The connection was made and then broke (reset, protocol error): the task app may have
    # died mid-rollout; another try is reasonable.
    return TaskAppError(f"task app connection failed: {_describe(exc)}", transient=True)


def _storable(outcome: RolloutOutcome) -> RolloutOutcome:
    """Metrics the database cannot hold (NaN, NUL characters, absurd nesting) make the answer
    invalid; a trace that cannot be stored is replaced by a note saying why, and the score
    kept."""
    if problem := json_value_problem(outcome.metrics, max_depth=MAX_ANSWER_DEPTH):
        raise _bad(outcome.http_status, f"metrics {problem}")
    if problem := json_value_problem(outcome.trace, max_depth=MAX_ANSWER_DEPTH):
        return replace(outcome, trace={"trace_not_stored": f"the task app's trace {problem}"})
    return outcome


def rollout_response_parse(*, status_code: int, content: bytes) -> RolloutOutcome:
    if status_code == 429 or status_code >= 500:
        raise TaskAppError(
            f"task app answered HTTP {status_code}: {_excerpt(content)}",
            transient=True,
            http_status=status_code,
        )
    if not 200 <= status_code < 300:
        raise TaskAppError(
            f"task app answered HTTP {status_code}: {_excerpt(content)}",
            transient=False,
            http_status=status_code,
        )
    try:
        data = jsonvalues.loads(content)
    except (ValueError, UnicodeDecodeError):
        raise _bad(status_code, f"body is not JSON: {_excerpt(content)}") from None
    except RecursionError:
        raise _bad(status_code, "body is nested too deeply to read") from None
    if not isinstance(data, dict):
        raise _bad(status_code, f"body is a JSON {type(data).__name__}, not an object")
    source, reward = _reward_object(data, status_code)
    objectives = _objectives(reward, source, status_code)
    scores = _scores(reward, source, objectives, status_code)
    kept = dict(reward)
    for name in ANSWER_EXTRAS:
        value = data.get(name)
        if value is None:
            continue
        if name != "artifact" and not isinstance(value, str):
            raise _bad(status_code, f"{name} is {_short(value)}, not a string")
        kept.setdefault(name, value)
    trace = data.get("trace")
    return RolloutOutcome(
        scores=scores,
        metrics=kept,
        trace=trace if isinstance(trace, dict | list) else None,
        http_status=status_code,
        outcome_objectives=objectives,
    )


def _reward_object(data: dict[str, Any], status_code: int) -> tuple[str, dict[str, Any]]:
    """("reward_info" | "metrics", the object): `reward_info` when it is an object."""
    for source in ("reward_info", "metrics"):
        if isinstance(data.get(source), dict):
            return source, data[source]
    raise _bad(status_code, "no `metrics` or `reward_info` object in the RolloutResponse")


def _objectives(reward: dict[str, Any], source: str, status_code: int) -> dict[str, float] | None:
    value = reward.get("outcome_objectives")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad(status_code, f"{source}.outcome_objectives is {_short(value)}, not an object")
    return {
        str(name): _finite(number, f"{source}.outcome_objectives.{name}", status_code)
        for name, number in value.items()
    }


def _scores(
    reward: dict[str, Any], source: str, objectives: dict[str, float] | None, status_code: int
) -> Scores:
    numbers = {name: _number(reward, name, source, status_code) for name in NUMBER_FIELDS}
    details = reward.get("details")
    verifier_score = None
    if isinstance(details, dict):
        verifier_score = _number(details, "verifier_score", f"{source}.details", status_code)
    if verifier_score is None:
        verifier_score = _number(reward, "verifier_score", source, status_code)
    candidates = (
        numbers["outcome_reward"],
        (objectives or {}).get("reward"),
        numbers["outcome_score"],
        numbers["reward_mean"],
    )
    score = next((value for value in candidates if value is not None), None)
    if score is None:
        raise _bad(
            status_code,
            f"{source} has none of outcome_reward, outcome_objectives.reward, outcome_score"
            " or reward_mean",
        )
    return Scores(
        score=score,
        reward_mean=numbers["reward_mean"],
        outcome_score=numbers["outcome_score"],
        events_score=numbers["events_score"],
        verifier_score=verifier_score,
    )


def _number(container: dict[str, Any], name: str, where: str, status_code: int) -> float | None:
    value = container.get(name)
    return None if value is None else _finite(value, f"{where}.{name}", status_code)


def _finite(value: Any, path: str, status_code: int) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(status_code, f"{path} is {_short(value)}, not a finite number")
    return float(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


def _bad(status_code: int, why: str) -> TaskAppError:
    return TaskAppError(f"invalid RolloutResponse: {why}", transient=False, http_status=status_code)


def _excerpt(content: bytes) -> str:
    text = content[:BODY_EXCERPT].decode("utf-8", errors="replace").strip()
    return text + ("…" if len(content) > BODY_EXCERPT else "") if text else "(empty body)"


def _describe(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
