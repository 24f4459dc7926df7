"""People's labels through the API: made and edited by their author, 400s that name the field,
another account's samples 404, labels carried by a rerun, and the job's agreement figures."""

from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest

from jobs.labels import LabelChange, label_save
from jobs.models import EvalJob, SampleLabel, Verdict
from tests.frontend.job_rows import TASK_APP_KEY
from tests.jobs.test_numbers_api import alice, finished_job  # noqa: F401 (a fixture)

JOBS = "/api/eval/jobs"


def label_url(job, seed, repeat=None) -> str:
    query = "" if repeat is None else f"?repeat={repeat}"
    return f"{JOBS}/{job.id}/seeds/{seed}/labels{query}"


def test_a_label_is_made_then_edited_by_its_author(client_alice, alice):  # noqa: F811
    job = finished_job(alice, {0: 1.0, 1: 0.0})
    made = client_alice.post(
        label_url(job, 1),
        {"verdict": "pass", "score": 0.9, "notes": "the checker is wrong", "tags": ["env-bug"]},
        format="json",
    )
    assert made.status_code == 201, made.content
    (label,) = made.json()["labels"]
    assert (label["verdict"], label["score"], label["tags"]) == ("pass", 0.9, ["env-bug"])
    assert (label["author"], label["on_original"], label["labelled_on"]) == ("alice", False, job.id)
    edited = client_alice.post(label_url(job, 1), {"verdict": "fail"}, format="json")
    assert edited.status_code == 200, edited.content
    (label,) = edited.json()["labels"]
    assert (label["verdict"], label["score"], label["notes"], label["tags"]) == (
        "fail",
        None,
        "",
        [],
    )
    assert SampleLabel.objects.count() == 1
    assert client_alice.get(label_url(job, 1)).json()["labels"] == [label]
    assert client_alice.get(label_url(job, 0)).json()["labels"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "verdict"),
        ({"verdict": "maybe"}, "verdict"),
        ({"verdict": "pass", "score": 1.5}, "score"),
        ({"verdict": "pass", "score": "0.5"}, "score"),
        ({"verdict": "pass", "score": True}, "score"),
        ({"verdict": "pass", "notes": "a\x00b"}, "notes"),
        ({"verdict": "pass", "notes": "x" * 10_001}, "notes"),
        ({"verdict": "pass", "tags": ["reward hack"]}, "tags"),
        ({"verdict": "pass", "tags": "reward-hack"}, "tags"),
        ([{"verdict": "pass"}], "body"),
    ],
)
def test_bad_labels_are_400_naming_the_field(client_alice, alice, body, field):  # noqa: F811
    job = finished_job(alice, {0: 1.0})
    answer = client_alice.post(label_url(job, 0), body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["fields"]
    assert not SampleLabel.objects.exists()


def test_a_bad_repeat_is_400_and_an_unknown_sample_404(client_alice, alice):  # noqa: F811
    job = finished_job(alice, {0: 1.0})
    answer = client_alice.post(label_url(job, 0, "x"), {"verdict": "pass"}, format="json")
    assert answer.status_code == 400 and "repeat" in answer.json()["fields"]
    for url in (label_url(job, 0, 1), label_url(job, 7), label_url(job, "abc")):
        assert client_alice.post(url, {"verdict": "pass"}, format="json").status_code == 404
        assert client_alice.get(url).status_code == 404


def test_another_account_never_sees_nor_labels_the_samples(client_alice, client_bob, alice):  # noqa: F811
    job = finished_job(alice, {0: 1.0})
    assert (
        client_alice.post(label_url(job, 0), {"verdict": "pass"}, format="json").status_code == 201
    )
    assert client_bob.get(label_url(job, 0)).status_code == 404
    assert client_bob.post(label_url(job, 0), {"verdict": "fail"}, format="json").status_code == 404
    assert client_bob.get(f"{JOBS}/{job.id}/labels").status_code == 404
    assert list(SampleLabel.objects.values_list("verdict", flat=True)) == ["pass"]


def test_a_rerun_carries_the_labels_of_the_samples_it_reused(client_alice, alice):  # noqa: F811
    parent = finished_job(alice, {0: 1.0, 1: None})
    client_alice.post(
        label_url(parent, 0), {"verdict": "fail", "tags": ["reward-hack"]}, format="json"
    )
    child_id = client_alice.post(f"{JOBS}/{parent.id}/rerun", {}, format="json").json()["job_id"]
    child = EvalJob.objects.get(pk=child_id)
    (carried,) = client_alice.get(label_url(child, 0)).json()["labels"]
    assert carried["on_original"] is True and carried["labelled_on"] == parent.id
    assert carried["job_id"] == child.id and carried["tags"] == ["reward-hack"]
    every = client_alice.get(f"{JOBS}/{child.id}/labels").json()
    assert every["num_labelled"] == 1 and every["labels"] == [carried]
    # The label stays where it was made: the parent's sample.
    assert SampleLabel.objects.get().seed_run.job_id == parent.id
    # A label on the rerun's own sample goes first, the original's after it.
    client_alice.post(label_url(child, 0), {"verdict": "pass"}, format="json")
    mine, original = client_alice.get(label_url(child, 0)).json()["labels"]
    assert (mine["on_original"], original["on_original"]) == (False, True)


def test_the_jobs_labels_come_with_its_agreement_figures(client_alice, alice):  # noqa: F811
    job = finished_job(alice, {0: 1.0, 1: 1.0, 2: 0.0, 3: None}, pass_threshold=0.5)
    verdicts = {0: ("pass", 1.0), 1: ("fail", 0.0), 2: ("fail", None), 3: ("unsure", None)}
    for seed, (verdict, score) in verdicts.items():
        body = {"verdict": verdict} | ({"score": score} if score is not None else {})
        assert client_alice.post(label_url(job, seed), body, format="json").status_code == 201
    answer = client_alice.get(f"{JOBS}/{job.id}/labels").json()
    assert answer["num_labelled"] == 4 and answer["num_samples"] == 4
    assert [label["seed"] for label in answer["labels"]] == [0, 1, 2, 3]
    people = answer["agreement"]["pairs"]["task_app_people"]
    # Task app: pass, pass, fail, fail (failed: 0); people: pass, fail, fail, (unsure).
    # 2 of 3 agree; pass rates 2/3 and 1/3: p_e = 4/9, kappa = (2/3 - 4/9) / (5/9) = 0.4.
    assert people["samples"] == 3 and people["agreement"] == pytest.approx(2 / 3)
    assert people["kappa"] == pytest.approx(0.4)
    # Scores on seeds 0 and 1: |1 - 1| and |1 - 0|.
    assert people["score_samples"] == 2 and people["mean_abs_difference"] == pytest.approx(0.5)
    assert answer["agreement"]["rated"] == {"task_app": 4, "judge": 0, "people": 3}
    summary = client_alice.get(f"{JOBS}/{job.id}/results").json()["summary"]
    assert summary["num_labelled"] == 4 and summary["agreement"] == answer["agreement"]


def test_labels_travel_in_the_csv_and_the_sft_export_filtered_by_verdict(client_alice, alice):  # noqa: F811
    job = finished_job(alice, {0: 1.0, 1: 1.0, 2: 0.5})
    client_alice.post(
        label_url(job, 0),
        {
            "verdict": "fail",
            "score": 0.2,
            "notes": f"leaks {TASK_APP_KEY}",
            "tags": ["reward-hack"],
        },
        format="json",
    )
    client_alice.post(label_url(job, 1), {"verdict": "pass"}, format="json")
    text = b"".join(client_alice.get(f"{JOBS}/{job.id}/results.csv").streaming_content).decode()
    assert TASK_APP_KEY not in text
    rows = {row["seed"]: row for row in csv.DictReader(io.StringIO(text))}
    assert (rows["0"]["num_labels"], rows["0"]["label_verdict"], rows["0"]["label_score"]) == (
        "1", "fail", "0.2"
    )  # fmt: skip
    assert rows["0"]["label_tags"] == "reward-hack" and "leaks" in rows["0"]["label_notes"]
    assert (rows["1"]["label_verdict"], rows["2"]["num_labels"], rows["2"]["label_verdict"]) == (
        "pass", "0", ""
    )  # fmt: skip

    def sft(query: str) -> list[dict]:
        answer = client_alice.get(f"{JOBS}/{job.id}/export/sft.jsonl{query}")
        return [json.loads(line) for line in b"".join(answer.streaming_content).splitlines()]

    assert [line["seed"] for line in sft("")] == [0, 1, 2]
    assert [line["seed"] for line in sft("?verdict=pass")] == [1]
    (failed,) = sft("?verdict=fail")
    assert failed["labels"][0]["verdict"] == "fail" and TASK_APP_KEY not in json.dumps(failed)
    assert "labels" not in sft("")[2]
    bad = client_alice.get(f"{JOBS}/{job.id}/export/sft.jsonl?verdict=maybe")
    assert bad.status_code == 400 and "verdict" in bad.json()["fields"]


def test_label_notes_are_redacted_in_the_api(client_alice, alice):  # noqa: F811
    job = finished_job(alice, {0: 1.0})
    answer = client_alice.post(
        label_url(job, 0), {"verdict": "pass", "notes": TASK_APP_KEY}, format="json"
    )
    assert TASK_APP_KEY not in answer.content.decode()
    assert TASK_APP_KEY not in client_alice.get(f"{JOBS}/{job.id}/labels").content.decode()


def test_the_traces_zip_carries_the_labels_and_is_built_again_when_one_changes(
    client_alice,
    alice,  # noqa: F811
):
    job = finished_job(alice, {0: 1.0, 1: 0.0})

    def download():
        answer = client_alice.get(f"{JOBS}/{job.id}/traces")
        return zipfile.ZipFile(io.BytesIO(b"".join(answer.streaming_content)))

    assert "labels.json" not in download().namelist()
    client_alice.post(label_url(job, 1), {"verdict": "pass", "notes": TASK_APP_KEY}, format="json")
    zf = download()
    kept = json.loads(zf.read("labels.json"))
    assert [(x["seed"], x["verdict"]) for x in kept["labels"]] == [(1, "pass")]
    assert TASK_APP_KEY not in zf.read("labels.json").decode()
    manifest = json.loads(zf.read("manifest.json"))
    assert (manifest["num_labels"], manifest["labels"], manifest["num_files"]) == (
        1, "labels.json", 2
    )  # fmt: skip
    client_alice.post(label_url(job, 1), {"verdict": "fail"}, format="json")
    again = json.loads(download().read("labels.json"))
    assert [x["verdict"] for x in again["labels"]] == ["fail"]


def test_the_comparison_shows_the_labels_of_both_jobs_side_by_side(client_alice, alice):  # noqa: F811
    base = finished_job(alice, {0: 1.0, 1: 1.0})
    candidate = finished_job(alice, {0: 1.0, 1: 0.0})
    client_alice.post(label_url(base, 1), {"verdict": "fail"}, format="json")
    client_alice.post(label_url(candidate, 1), {"verdict": "pass"}, format="json")
    answer = client_alice.get(f"/api/eval/compare?base={base.id}&candidate={candidate.id}").json()
    by_seed = {s["seed"]: (s["base_label"], s["candidate_label"]) for s in answer["seeds"]}
    assert by_seed == {0: (None, None), 1: ("fail", "pass")}


def test_a_job_may_take_peoples_labels_as_its_score_and_says_so(client_alice, client_bob, alice):  # noqa: F811
    job = finished_job(alice, {0: 1.0, 1: 1.0, 2: 0.0, 3: None}, pass_threshold=0.5)
    client_alice.post(label_url(job, 1), {"verdict": "fail"}, format="json")  # counts 0
    client_alice.post(label_url(job, 3), {"verdict": "pass", "score": 0.8}, format="json")
    client_alice.post(label_url(job, 2), {"verdict": "unsure"}, format="json")  # the task app's
    summary = client_alice.get(f"{JOBS}/{job.id}/results").json()["summary"]
    assert summary["reward_source"] == "job" and summary["mean_score"] == pytest.approx(0.5)
    url = f"{JOBS}/{job.id}/reward_source"
    assert (
        client_bob.put(url, {"reward_source": "human_else_task_app"}, format="json").status_code
        == 404
    )
    bad = client_alice.put(url, {"reward_source": "people"}, format="json")
    assert bad.status_code == 400 and "reward_source" in bad.json()["fields"]
    answer = client_alice.put(url, {"reward_source": "human_else_task_app"}, format="json")
    assert answer.json() == {"job_id": job.id, "reward_source": "human_else_task_app"}
    whole = client_alice.get(f"{JOBS}/{job.id}/results").json()
    summary = whole["summary"]
    # Values 1.0 (task app), 0 (people: fail), 0.0 (task app: unsure), 0.8 (people).
    assert summary["reward_source"] == "human_else_task_app"
    assert summary["num_scored_by_people"] == 2
    assert summary["mean_score"] == pytest.approx(1.8 / 4) == summary["mean_reward"]
    assert summary["pass_rate"] == pytest.approx(2 / 4) and summary["num_passed"] == 2
    assert (summary["job_mean_score"], summary["job_pass_rate"]) == (pytest.approx(0.5), 0.5)
    assert whole["mean_score"] == summary["mean_score"]  # repeated at the top, as the SDK reads
    back = client_alice.put(url, {"reward_source": "job"}, format="json")
    assert back.json()["reward_source"] == "job"


def test_a_rejudgement_carries_the_labels_of_the_rollouts_it_judges_again(client_alice, alice):  # noqa: F811
    job = finished_job(alice, {0: 1.0, 1: 0.0})
    client_alice.post(label_url(job, 1), {"verdict": "pass", "score": 1.0}, format="json")
    answer = client_alice.post(
        f"{JOBS}/{job.id}/judge",
        {"verifier_config": {"enabled": True, "reward_source": "verifier"}},
        format="json",
    )
    assert answer.status_code == 201, answer.content
    rejudged = EvalJob.objects.get(pk=answer.json()["job_id"])
    (carried,) = client_alice.get(label_url(rejudged, 1)).json()["labels"]
    assert (carried["on_original"], carried["labelled_on"]) == (True, job.id)
    assert client_alice.get(label_url(rejudged, 0)).json()["labels"] == []
    every = client_alice.get(f"{JOBS}/{rejudged.id}/labels").json()
    assert every["num_labelled"] == 1 and every["agreement"]["rated"]["people"] == 1


def test_several_people_label_one_sample_and_their_majority_counts(
    client_alice,
    alice,  # noqa: F811
    django_user_model,
):
    job = finished_job(alice, {0: 1.0}, pass_threshold=0.5)
    run = job.seed_runs.get()
    for name, verdict in (("carol", Verdict.FAIL), ("dave", Verdict.FAIL)):
        person = django_user_model.objects.create_user(username=name)
        label_save(seed_run=run, author=person, change=LabelChange(verdict=verdict, score=0.0))
    client_alice.post(label_url(job, 0), {"verdict": "pass"}, format="json")
    answer = client_alice.get(label_url(job, 0)).json()["labels"]
    assert [(x["author"], x["verdict"]) for x in answer] == [
        ("carol", "fail"), ("dave", "fail"), ("alice", "pass")
    ]  # fmt: skip
    people = client_alice.get(f"{JOBS}/{job.id}/labels").json()["agreement"]["pairs"]
    # Two fails to one pass: people say fail; the task app passed it.
    assert people["task_app_people"]["agreement"] == 0.0
    assert people["task_app_people"]["mean_abs_difference"] == 1.0
