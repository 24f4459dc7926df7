"""Commands that decide with numbers: compare (the server's paired figures), gate (pass, worse
or too thin, as an exit code and a Markdown summary) and plan (how many seeds a comparison
needs)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from evalhub_client.api import Api
from evalhub_client.errors import CliError, Exit
from evalhub_client.gate import WORDS, gate_decide, gate_markdown, jobs_over
from evalhub_client.output import console, emit_json, json_option, number, state, table
from evalhub_client.plan import Plan, pilot_sd, plan_body, plan_make, spread_of

SEEDS_SHOWN = 20
SIDE_ROWS = (
    ("mean score", "mean_score", ".4f"), ("95% interval", "mean_score_ci95", ".4f"),
    ("pass rate", "pass_rate", ".3f"), ("samples", "num_samples", "d"),
    ("failed", "num_failed", "d"), ("tokens", "total_tokens", "d"),
    ("cost (USD)", "total_cost_usd", "$"), ("latency p50 (ms)", "latency_p50_ms", ".0f"),
    ("status", "status", ""),
)  # fmt: skip


def compare_read(api: Api, base: str, candidate: str) -> dict[str, Any]:
    return api.call("GET", "/eval/compare", params={"base": base, "candidate": candidate},
                    what=f"job {base} or {candidate}")  # fmt: skip


@click.command()
@click.argument("base")
@click.argument("candidate")
@click.option("--seeds", "shown", default=SEEDS_SHOWN, show_default=True,
              help="How many seeds to list (regressions first).")  # fmt: skip
@json_option
def compare(base: str, candidate: str, shown: int) -> None:
    """CANDIDATE against BASE on the seeds both ran: the paired figures, regressions first."""
    result = compare_read(state().api(), base, candidate)
    if state().json:
        emit_json(result)
        return
    b, c = result["base"], result["candidate"]
    rows = [[label, number(b.get(k), spec), number(c.get(k), spec)] for label, k, spec in SIDE_ROWS]
    console.print(table(None, ["", f"base {b['job_id']}", f"candidate {c['job_id']}"], rows))
    paired = [
        ["test", str(result.get("test"))],
        ["shared seeds", number(result.get("num_seeds"), "d")],
        ["mean difference", number(result.get("mean_difference"), "+.4f")],
        ["95% interval", number(result.get("mean_difference_ci95"), "+.4f")],
        ["p-value", number(result.get("p_value"), ".4g")],
        [
            "wins / losses / ties",
            f"{result.get('wins')} / {result.get('losses')} / {result.get('ties')}",
        ],
        ["regressions", number(len(result.get("regressions") or []), "d")],
        ["improvements", number(len(result.get("improvements") or []), "d")],
        ["seeds only in base / candidate",
         f"{len(result.get('only_in_base') or [])} / {len(result.get('only_in_candidate') or [])}"],
    ]  # fmt: skip
    console.print(table("paired: candidate − base", ["", ""], paired))
    seeds = [[s.get("kind") or "", str(s["seed"]), number(s["base_score"]), number(s["candidate_score"]),
              number(s["delta"], "+.3f")] for s in (result.get("seeds") or [])[:shown]]  # fmt: skip
    if seeds:
        console.print(table("seeds", ["", "seed", "base", "candidate", "delta"], seeds))


@click.command()
@click.argument("base")
@click.argument("candidate")
@click.option("--max-drop", default=0.02, show_default=True, type=click.FloatRange(min=0),
              help="The largest drop of the mean score that still passes.")  # fmt: skip
@click.option("--alpha", default=0.05, show_default=True, type=click.FloatRange(0, 0.5, min_open=True),
              help="1 - the confidence of the decision (one-sided).")  # fmt: skip
@click.option("--min-seeds", default=10, show_default=True, type=click.IntRange(min=2),
              help="Fewer shared seeds than this: too thin to say (exit 2).")  # fmt: skip
@click.option("--markdown", type=click.Path(path_type=Path), help="Write a Markdown summary here.")
@json_option
def gate(base: str, candidate: str, max_drop: float, alpha: float, min_seeds: int,
         markdown: Path | None) -> None:  # fmt: skip
    """Exit 0 if CANDIDATE is not worse than BASE by more than --max-drop (paired test on shared
    seeds), 1 if it is, 2 if the seeds cannot tell."""
    api = state().api()
    result = compare_read(api, base, candidate)
    jobs_over(result)
    verdict = gate_decide(result, max_drop=max_drop, alpha=alpha, min_seeds=min_seeds)
    text = gate_markdown(result, verdict, max_drop=max_drop, alpha=alpha, url=api.config.url)
    if markdown:
        markdown.write_text(text)
    if state().json:
        b = verdict.bounds
        emit_json({"exit_code": int(verdict.code), "verdict": WORDS[verdict.code],
                   "reason": verdict.reason, "max_drop": max_drop, "alpha": alpha,
                   "shared_seeds": result.get("num_seeds"),
                   "mean_difference": result.get("mean_difference"),
                   "lower_bound": b.lower if b else None, "upper_bound": b.upper if b else None,
                   "seeds_to_settle": verdict.seeds_to_settle,
                   "p_value": result.get("p_value"), "regressions": result.get("regressions")})  # fmt: skip
    else:
        sys.stdout.write(text)
    raise SystemExit(int(verdict.code))


@click.command()
@click.argument("base")
@click.option("--effect", required=True, type=float, help="The difference of mean score to detect.")
@click.option("--power", default=0.8, show_default=True, type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="The chance of detecting the effect when it is there.")  # fmt: skip
@click.option("--alpha", default=0.05, show_default=True, type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="The test's level (two-sided): its chance of a difference that is not there.")  # fmt: skip
@click.option("--max-seeds", type=click.IntRange(min=2),
              help="The seeds your dataset has: the fewest repeats that fit in them.")  # fmt: skip
@click.option("--correlation", default=0.5, show_default=True, type=click.FloatRange(-1, 1),
              help="Assumed correlation of two agents' seed scores (ignored with --candidate).")  # fmt: skip
@click.option("--candidate", help="A pilot job on the same seeds: measure the differences instead.")
@json_option
def plan(base: str, effect: float, power: float, alpha: float, max_seeds: int | None,
         correlation: float, candidate: str | None) -> None:  # fmt: skip
    """How many seeds (and repeats) a paired comparison needs to detect --effect, sized from
    BASE's per-seed scores."""
    if effect == 0:
        raise click.BadParameter("an effect of 0 cannot be detected", param_hint="--effect")
    api = state().api()
    job = api.call("GET", f"/eval/jobs/{base}/results", what=f"job {base}")
    if job.get("status") not in ("completed", "failed", "cancelled"):
        raise CliError(f"job {base} is still {job.get('status')}: plan from a finished job",
                       Exit.RUNNING)  # fmt: skip
    spread = spread_of(job.get("seeds") or [])
    measured = pilot_sd(compare_read(api, base, candidate)) if candidate else None
    made = plan_make(spread, effect=abs(effect), alpha=alpha, power=power,
                     correlation=correlation, measured_sd=measured, max_seeds=max_seeds)  # fmt: skip
    if state().json:
        emit_json({"job_id": base, **plan_body(made)})
        return
    _plan_show(base, made)


def _plan_show(base: str, made: Plan) -> None:
    s = made.spread
    within = number(s.within, ".4f") if s.within is not None else "unknown (no seed ran twice)"
    assumed = (f"measured against the pilot: sd of differences {made.measured_sd:.4f}"
               if made.measured_sd is not None else f"assumed correlation {made.correlation:g} "
               "(measure it with --candidate PILOT)")  # fmt: skip
    for line in (
        f"Base {base}: {s.seeds} seeds × {s.repeats} repeats, mean {s.mean:.4f}, variance of "
        f"seed means {s.between:.4f}, within a seed {within}; {assumed}.",
        f"Method: {made.method}; effect {made.effect:g}, power {made.power:g}, alpha "
        f"{made.alpha:g} (two-sided).",
    ):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    rows = [[str(r.repeats), number(r.sd, ".4f"), str(r.seeds), str(r.seeds * r.repeats),
             number(r.power, ".3f")] for r in made.rows]  # fmt: skip
    console.print(table(None, ["repeats", "sd of a seed's difference", "seeds needed",
                               "samples per job", "power"], rows))  # fmt: skip
    pick = made.recommended
    if pick is None:
        console.print(f"None of these fits in {made.max_seeds} seeds: run more seeds, or aim at "
                      "a larger effect.", soft_wrap=True)  # fmt: skip
    else:
        console.print(f"Plan: {pick.seeds} seeds × {pick.repeats} repeats ({pick.seeds * pick.repeats}"
                      " samples per job), the same seeds for both jobs.", soft_wrap=True)  # fmt: skip
