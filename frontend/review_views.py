"""The review queue (`jobs.review`): one sample at a time, its conversation beside the label
form, the samples still without a label in the order the reviewer chose. Keyboard-driven by
frontend/static/frontend/review.js; a label is a plain form post, so the page works without it."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from frontend import selectors as dash
from jobs import labels, selectors
from jobs.api.labels import LabelInput
from jobs.fields import INT64_MAX
from jobs.models import EvalJob, RewardSource
from jobs.review import DEFAULT_GAP, DEFAULT_ORDER, ORDERS, Key, review_queue
from traces.redaction import job_redactor

NUMBER_RE = re.compile(r"-?[0-9]{1,19}")


def _int(params: QueryDict, name: str, *, low: int, high: int) -> int | None:
    raw = params.get(name, "")
    value = int(raw) if NUMBER_RE.fullmatch(raw) else None
    return value if value is not None and low <= value <= high else None


def _key(params: QueryDict) -> Key | None:
    """The (seed, repeat) the parameters name (repeat 0 unless given); None when they name no
    seed. What no sample can be is a 404: the database would refuse to even compare it."""
    if not params.get("seed"):
        return None
    seed = _int(params, "seed", low=-INT64_MAX, high=INT64_MAX)
    repeat = _int(params, "repeat", low=0, high=2**31 - 1) if params.get("repeat") else 0
    if seed is None or repeat is None:
        raise Http404("No such sample in this job.")
    return seed, repeat


def _where(params: QueryDict) -> tuple[str, int]:
    order = params.get("order", DEFAULT_ORDER)
    return (order if order in ORDERS else DEFAULT_ORDER), _int(
        params, "shuffle", low=-INT64_MAX, high=INT64_MAX
    ) or 0


def review_url(job: EvalJob, *, order: str, shuffle: int, key: Key | None) -> str:
    query = {"order": order, **({"shuffle": shuffle} if order == "random" else {})}
    if key is not None:
        query |= {"seed": key[0], "repeat": key[1]}
    return f"{reverse('frontend:review', args=[job.id])}?{urlencode(query)}"


@login_required
@require_GET
@never_cache
def review(request: HttpRequest, job_id: str) -> HttpResponse:
    job = selectors.job_owned(owner=request.user, job_id=job_id)
    order, shuffle = _where(request.GET)
    queue = review_queue(job=job, order=order, shuffle=shuffle)
    key = _key(request.GET) or queue.first()
    context = {
        "job": job, "queue": queue, "order": order, "orders": ORDERS, "shuffle": shuffle,
        "progress": dash.progress_bar(succeeded=queue.num_labelled, failed=0, total=queue.total),
        "nav": "jobs",
        "order_urls": {o: review_url(job, order=o, shuffle=shuffle, key=None) for o in ORDERS},
    }  # fmt: skip
    if key is None:
        return render(request, "frontend/review.html", context)
    if queue.position(key) == 0:
        raise Http404("No such finished sample in this job.")
    seed_run = selectors.seed_run_get(job=job, seed=key[0], repeat=key[1])
    redactor = job_redactor(job=job)
    carried = redactor.value(labels.labels_of([seed_run])[seed_run.id])
    mine = next((b for b in carried if b["author"] == request.user.get_username()
                 and not b["on_original"]), None)  # fmt: skip
    near = {"previous": queue.before(key), "next": queue.after(key)}
    return render(
        request,
        "frontend/review.html",
        {
            **context,
            "seed_run": seed_run,
            "position": queue.position(key),
            "gap": queue.gaps.get(key),
            "disagrees": (queue.gaps.get(key) or 0.0) > DEFAULT_GAP,
            # A big sample's first calls; the seed page has the rest, a page at a time.
            "calls": dash.seed_attempts_page(
                seed_run=seed_run, redactor=redactor, size=dash.SEED_PAGE_CALLS
            ),
            "labels": carried,
            "mine": mine,
            "near_urls": {
                name: review_url(job, order=order, shuffle=shuffle, key=k) if k else None
                for name, k in near.items()
            },
        },
    )


def _form_body(post: QueryDict) -> dict:
    """The label form as the API's body: an empty score is none, tags split on spaces and
    commas; a score that is not a number is left as text for the API's rule to refuse."""
    body = {"verdict": post.get("verdict", ""), "notes": post.get("notes", "")}
    score = post.get("score", "").strip()
    if score:
        try:
            body["score"] = float(score)
        except ValueError:
            body["score"] = score
    body["tags"] = [t for t in re.split(r"[\s,]+", post.get("tags", "")) if t]
    return body


@login_required
@require_POST
def review_label(request: HttpRequest, job_id: str) -> HttpResponse:
    """Save the reviewer's label of the sample, then show the next one without a label."""
    job = selectors.job_owned(owner=request.user, job_id=job_id)
    order, shuffle = _where(request.POST)
    key = _key(request.POST)
    seed_run = selectors.seed_run_get(job=job, seed=key[0], repeat=key[1]) if key else None
    if seed_run is None:
        raise Http404("No such sample in this job.")
    data = LabelInput(data=_form_body(request.POST))
    if not data.is_valid():
        problems = "; ".join(f"{name}: {errors[0]}" for name, errors in data.errors.items())
        messages.error(request, f"Not saved. {problems}")
        return redirect(review_url(job, order=order, shuffle=shuffle, key=key))
    labels.label_save(seed_run=seed_run, author=request.user, change=data.change())
    queue = review_queue(job=job, order=order, shuffle=shuffle)
    return redirect(review_url(job, order=order, shuffle=shuffle, key=queue.after(key)))


@login_required
@require_POST
def review_reward_source(request: HttpRequest, job_id: str) -> HttpResponse:
    """The job page's switch: the job's score from people's labels where present, or not."""
    job = selectors.job_owned(owner=request.user, job_id=job_id)
    wanted = request.POST.get("reward_source", "")
    source = (
        RewardSource.HUMAN_ELSE_TASK_APP if wanted == "human_else_task_app" else RewardSource.JOB
    )
    labels.job_reward_source_set(job=job, source=source)
    return redirect(f"{reverse('frontend:job-detail', args=[job.id])}#agreement")
