"""The request bodies of the API: each parsed by one input serializer, every error a 400 that
names the field."""

from __future__ import annotations

from typing import Any

import orjson
from django.conf import settings
from rest_framework import serializers

from jobs import kinds, replays, services
from jobs.fields import (
    INT64_MAX,
    JsonObjectField,
    SeedListField,
    StrictIntegerField,
    StrictNumberField,
    TaskAppUrlField,
    unknown_fields,
)
from jobs.rollout_limits import rollout_limits_validate
from jobs.verifier import config as verifier

# What a tag may hold: a label, stored and searched as it is.
TAG_RE = r"^[A-Za-z0-9._:/+\-]{1,64}$"


def body_parsed(data: Any, input_class: type[serializers.Serializer]) -> serializers.Serializer:
    """A request body parsed by its input serializer: a body that is not a JSON object, or a
    field that breaks a rule, is a 400 naming it."""
    if not isinstance(data, dict):
        raise serializers.ValidationError({"body": ["must be a JSON object"]})
    parsed = input_class(data=data)
    parsed.is_valid(raise_exception=True)
    return parsed


class JobCreateInput(serializers.Serializer):
    task_app_url = TaskAppUrlField(max_length=2048)
    task_app_kind = serializers.ChoiceField(choices=kinds.KINDS, required=False, allow_null=True)
    task_app_api_key = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=4096
    )
    app_id = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=255
    )
    env_name = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=255
    )
    seeds = SeedListField()
    policy = JsonObjectField(required=False, allow_null=True)
    env_config = JsonObjectField(required=False, allow_null=True)
    verifier_config = JsonObjectField(required=False, allow_null=True)
    mode = serializers.ChoiceField(choices=["eval", "rl"], required=False, allow_null=True)
    max_concurrent = StrictIntegerField(min_value=1, required=False, allow_null=True)
    timeout = StrictNumberField(min_value=1.0, max_value=1.0, required=False, allow_null=True)
    max_cost_usd = StrictNumberField(min_value=0.0, max_value=1e9, required=False, allow_null=True)
    max_tokens = StrictIntegerField(min_value=1, required=False, allow_null=True)
    rollout_limits = JsonObjectField(required=False, allow_null=True)
    repeats = StrictIntegerField(min_value=1, required=False, allow_null=True)
    pass_threshold = StrictNumberField(
        min_value=-1e9, max_value=1e9, required=False, allow_null=True
    )
    max_failures = StrictNumberField(min_value=0.0, max_value=1e9, required=False, allow_null=True)
    name = serializers.CharField(required=False, allow_blank=True, allow_null=True, max_length=200)
    tags = serializers.ListField(
        child=serializers.RegexField(
            TAG_RE, max_length=64,
            error_messages={"invalid": "a tag is 1-64 letters, digits and . _ - : / +"},
        ),
        required=False, allow_null=True, max_length=20,
    )  # fmt: skip
    metadata = JsonObjectField(required=False, allow_null=True)
    # {"job_id": an earlier job of the account, "on_miss": "fail" | "call"} (docs/replay.md).
    replay = JsonObjectField(required=False, allow_null=True)
    # {"scope": "job" | "account", "ttl_s": seconds}: identical calls answered from a cache.
    cache = JsonObjectField(required=False, allow_null=True)
    # synth-ai 0.5's eval CLI sends the `ops` of its config; accepted, not used.
    ops = serializers.ListField(
        child=serializers.CharField(max_length=255), required=False, allow_null=True, max_length=100
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Limits come from settings, read when the request is validated.
        self.fields["max_concurrent"].max_value = settings.EVALHUB_MAX_CONCURRENT
        self.fields["timeout"].max_value = settings.EVALHUB_MAX_TIMEOUT_S
        self.fields["repeats"].max_value = settings.EVALHUB_MAX_REPEATS

    def validate_max_failures(self, value: float | None) -> float | None:
        """A count of samples (a whole number >= 1) or a fraction of them (0 < f < 1)."""
        if value is not None and (value <= 0 or (value >= 1 and value != int(value))):
            raise serializers.ValidationError(
                "must be a whole number of samples (>= 1) or a fraction of them (0 < f < 1)"
            )
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        samples = len(attrs.get("seeds") or []) * (attrs.get("repeats") or 1)
        if samples > settings.EVALHUB_MAX_SEEDS:
            raise serializers.ValidationError(
                {"repeats": [f"seeds x repeats is {samples}; at most "
                             f"{settings.EVALHUB_MAX_SEEDS} samples are allowed"]}
            )  # fmt: skip
        # The settings the job's kind needs (jobs.kinds), each under its field.
        problems = kinds.settings_problems(
            attrs.get("task_app_kind") or kinds.SYNTH,
            attrs.get("env_config") or {},
            attrs.get("policy") or {},
        )
        if problems:
            raise serializers.ValidationError({k: [v] for k, v in problems.items()})
        return attrs

    def validate_verifier_config(self, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """synth-ai's verifier section: `reward_source` is one of `REWARD_SOURCES` (as synth-ai
        reads it: any case, spaces around), `enabled` a boolean; the rest `config_errors`."""
        if value is None:
            return None
        source = value.get("reward_source")
        if source is not None and (
            not isinstance(source, str) or source.strip().lower() not in verifier.REWARD_SOURCES
        ):
            raise serializers.ValidationError(
                f"reward_source must be one of {', '.join(verifier.REWARD_SOURCES)}; got {source!r}"
            )
        if "enabled" in value and not isinstance(value["enabled"], bool | None):
            raise serializers.ValidationError("enabled must be true or false")
        errors = verifier.config_errors(value)
        if errors:
            raise serializers.ValidationError(errors)
        return value

    def validate_metadata(self, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """At most EVALHUB_MAX_METADATA_BYTES as compact UTF-8 JSON."""
        limit = settings.EVALHUB_MAX_METADATA_BYTES
        size = 0 if value is None else len(orjson.dumps(value))
        if size > limit:
            raise serializers.ValidationError(
                f"is {size} bytes as JSON; at most {limit} are allowed (EVALHUB_MAX_METADATA_BYTES)"
            )
        return value

    def validate_replay(self, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """Its shape; whose job it names is checked with the account (jobs.replays)."""
        if value is None:
            return None
        problems = {k: ["unknown field"] for k in value if k not in ("job_id", "on_miss")}
        if not isinstance(value.get("job_id"), str) or not value.get("job_id"):
            problems["job_id"] = ["must be the id of an earlier job of yours"]
        if value.get("on_miss", replays.ON_MISS_FAIL) not in replays.ON_MISS:
            problems["on_miss"] = [f"must be one of {', '.join(replays.ON_MISS)}"]
        if problems:
            raise serializers.ValidationError(problems)
        return value

    def validate_cache(self, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """{scope, ttl_s} with their defaults filled in."""
        if value is None:
            return None
        problems = {k: ["unknown field"] for k in value if k not in ("scope", "ttl_s")}
        scope = value.get("scope", "job")
        if scope not in replays.CACHE_SCOPES:
            problems["scope"] = [f"must be one of {', '.join(replays.CACHE_SCOPES)}"]
        ttl = value.get("ttl_s", replays.CACHE_TTL_DEFAULT_S)
        if (isinstance(ttl, bool) or not isinstance(ttl, int | float)
                or not 0 < ttl <= replays.CACHE_TTL_MAX_S):  # fmt: skip
            problems["ttl_s"] = [
                f"must be a number of seconds, 0 < s <= {replays.CACHE_TTL_MAX_S:g}"
            ]
        if problems:
            raise serializers.ValidationError(problems)
        return {"scope": scope, "ttl_s": float(ttl)}

    def validate_rollout_limits(self, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return rollout_limits_validate(value)

    def validate_seeds(self, value: Any) -> list[int]:
        if not isinstance(value, list):
            raise serializers.ValidationError("must be a list of integers")
        if not value:
            raise serializers.ValidationError("must not be empty")
        limit = settings.EVALHUB_MAX_SEEDS
        if len(value) > limit:
            raise serializers.ValidationError(
                f"has {len(value)} seeds; at most {limit} are allowed"
            )
        bad = [
            s for s in value if isinstance(s, bool) or not isinstance(s, int) or abs(s) > INT64_MAX
        ]
        if bad:
            raise serializers.ValidationError(f"must be a list of integers; {bad[0]!r} is not one")
        seen: set[int] = set()
        duplicates = sorted({s for s in value if s in seen or seen.add(s)})
        if duplicates:
            raise serializers.ValidationError(f"has duplicates: {duplicates[:10]}")
        return value

    def warnings(self) -> list[dict[str, str | None]]:
        """The body's fields evalhub does not know, each with the closest known one: kept out of
        the job and named in the answer (jobs.fields.unknown_fields). In `verifier_config` only
        near misses (it carries synth's own fields too); in `env_config` the keys of a kind
        evalhub drives itself (a synth task app's keys are its own)."""
        body = self.initial_data
        found = unknown_fields(body, self.fields)
        found += unknown_fields(
            body.get("verifier_config"), verifier.KNOWN_KEYS, where="verifier_config",
            near_misses_only=True,
        )  # fmt: skip
        kind = self.validated_data.get("task_app_kind") or kinds.SYNTH
        if kind in kinds.ENV_CONFIG_KEYS:
            found += unknown_fields(
                body.get("env_config"), kinds.ENV_CONFIG_KEYS[kind], where="env_config"
            )
        return found

    def to_spec(self) -> services.JobSpec:
        d = self.validated_data

        def given(name: str, default: Any) -> Any:
            value = d.get(name)
            return default if value is None else value

        return services.JobSpec(
            task_app_url=d["task_app_url"],
            seeds=d["seeds"],
            task_app_api_key=d.get("task_app_api_key") or None,
            app_id=d.get("app_id") or None,
            env_name=d.get("env_name") or None,
            policy=given("policy", {}),
            env_config=given("env_config", {}),
            verifier_config=d.get("verifier_config"),
            mode=given("mode", "eval"),
            max_concurrent=given("max_concurrent", 5),
            timeout=given("timeout", 600.0),
            max_cost_usd=d.get("max_cost_usd"),
            max_tokens=d.get("max_tokens"),
            rollout_limits=d.get("rollout_limits"),
            repeats=given("repeats", 1),
            pass_threshold=given("pass_threshold", 1.0),
            max_failures=d.get("max_failures"),
            name=(d.get("name") or "").strip(),
            tags=given("tags", []),
            metadata=given("metadata", {}),
            task_app_kind=given("task_app_kind", kinds.SYNTH),
            cache=d.get("cache"),
            warnings=self.warnings(),
        )


class JobCancelInput(serializers.Serializer):
    reason = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=1000
    )


class JobRerunInput(serializers.Serializer):
    """POST /rerun: which seeds ("failed", "all" or a list of the parent's seeds), and
    optionally another policy."""

    seeds = serializers.JSONField(required=False)
    policy = JsonObjectField(required=False, allow_null=True)

    def validate_seeds(self, value: Any) -> str | list[int]:
        if value in ("failed", "all"):
            return value
        if (
            not isinstance(value, list)
            or not value
            or any(isinstance(s, bool) or not isinstance(s, int) for s in value)
        ):
            raise serializers.ValidationError(
                '"failed", "all" or a non-empty list of the job\'s seeds'
            )
        if len(value) > settings.EVALHUB_MAX_SEEDS:
            raise serializers.ValidationError(f"at most {settings.EVALHUB_MAX_SEEDS} seeds")
        return value


class JobReplayInput(serializers.Serializer):
    """POST /replay: what a call that misses its recording gets; any field of the create body
    besides overrides the replayed job's (task_app_url, env_config, a subset of its seeds...)."""

    on_miss = serializers.ChoiceField(choices=replays.ON_MISS, required=False)
