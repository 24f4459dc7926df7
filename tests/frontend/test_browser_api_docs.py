"""/api/docs in Chromium: ReDoc renders the schema, with typed answers, its groups explained,
the event stream, and the page asks no other host for anything and logs no error."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect


@pytest.mark.parametrize("path", ["/api/docs", "/api/docs/"])
def test_api_docs_render_with_no_request_elsewhere_and_no_console_error(page, web_server, path):
    ours = urlsplit(web_server).netloc
    elsewhere: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: r.url.startswith(("http:", "https:")) and urlsplit(
        r.url).netloc != ours and elsewhere.append(r.url))  # fmt: skip
    page.on("console", lambda m: m.type in ("error", "warning") and errors.append(m.text))
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    page.goto(path)
    expect(page.get_by_role("heading", name="evalhub API (").first).to_be_visible()
    # The groups, each with its description, and the event stream among the operations.
    expect(page.get_by_text("Create, list, read and cancel eval jobs.")).to_be_visible()
    stream = page.get_by_text("A job's events as server-sent events, until it ends").first
    expect(stream).to_be_attached()
    # Typed answers: the samples show a job's fields, not property1/property2.
    expect(page.get_by_text('"max_concurrent"').first).to_be_attached()
    expect(page.get_by_text('"mean_score_ci95"').first).to_be_attached()
    assert "property1" not in page.content()
    page.wait_for_load_state("networkidle")
    assert elsewhere == []
    assert errors == []
