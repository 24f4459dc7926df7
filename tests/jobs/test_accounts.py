"""Accounts without prompts: `createuser` and `createapikey --password[-stdin]`, then the
dashboard's sign-in with what they printed or read."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from jobs.models import ApiKey


def run(*args: str, stdin: str | None = None, monkeypatch=None) -> list[str]:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip().splitlines()


def signs_in(client, username: str, password: str) -> bool:
    response = client.post("/login/", {"username": username, "password": password})
    return response.status_code == 302 and response.url == "/"


@pytest.mark.django_db
def test_createuser_prints_a_generated_password_that_signs_in(client):
    lines = run("createuser", "carol")
    password = lines[-1]
    assert len(password) >= 16
    assert signs_in(client, "carol", password)
    assert client.get("/").status_code == 200


@pytest.mark.django_db
def test_createuser_reads_the_password_from_stdin_and_updates_an_existing_user(client, monkeypatch):
    run("createapikey", "dave")  # a user made by createapikey has no password
    assert not signs_in(client, "dave", "s3cret-enough")
    lines = run(
        "createuser", "dave", "--password-stdin", stdin="s3cret-enough\n", monkeypatch=monkeypatch
    )
    assert "s3cret-enough" not in "\n".join(lines)
    assert signs_in(client, "dave", "s3cret-enough")


@pytest.mark.django_db
def test_a_short_password_is_refused(monkeypatch):
    with pytest.raises(CommandError, match="too short"):
        run("createuser", "erin", "--password-stdin", stdin="short\n", monkeypatch=monkeypatch)
    with pytest.raises(CommandError, match="no password"):
        run("createuser", "erin", "--password-stdin", stdin="", monkeypatch=monkeypatch)


@pytest.mark.django_db
def test_createapikey_with_a_password_makes_a_key_and_a_sign_in(client, monkeypatch):
    lines = run("createapikey", "frank", "--password")
    key = lines[-1]
    password = next(line for line in lines if "password" in line).rsplit(" ", 1)[1]
    assert key.startswith("ehk_") and ApiKey.objects.filter(user__username="frank").count() == 1
    assert signs_in(client, "frank", password)
    lines = run(
        "createapikey",
        "grace",
        "--password-stdin",
        stdin="horse-battery\n",
        monkeypatch=monkeypatch,
    )
    assert lines[-1].startswith("ehk_") and "horse-battery" not in "\n".join(lines)
    assert signs_in(client, "grace", "horse-battery")


@pytest.mark.django_db
def test_the_login_page_says_how_accounts_are_made(client):
    page = client.get("/login/").content.decode()
    assert "manage.py createuser NAME" in page
    assert "createapikey NAME --password" in page
