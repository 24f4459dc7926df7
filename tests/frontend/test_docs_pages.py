"""The pages a newcomer opens first that are not the dashboard: the API docs (served from our own
static files, with and without the slash) and the icon."""

from __future__ import annotations

import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/api/docs", "/api/docs/"])
def test_the_api_docs_load_nothing_from_elsewhere(path):
    response = Client().get(path)
    assert response.status_code == 200
    html = response.content.decode()
    scripts = re.findall(r'<script src="([^"]+)"', html)
    assert scripts and all(s.startswith("/static/drf_spectacular_sidecar/") for s in scripts)
    assert not re.search(r'(src|href)="(https?:)?//', html)  # no CDN, no web fonts
    assert Client().get(scripts[0]).status_code == 200


def test_favicon_ico_is_an_icon():
    response = Client().get("/favicon.ico", follow=True)
    assert response.status_code == 200
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert body[:4] == b"\x00\x00\x01\x00"  # an ICO header
