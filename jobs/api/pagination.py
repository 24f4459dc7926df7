"""The jobs list's pages: a cursor over (created_at, id), newest first. What a client sends as
`limit` or `cursor` is checked here, every refusal a 400 naming it."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from django.utils.dateparse import parse_datetime
from rest_framework import exceptions
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request


class JobCursorPagination(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get("limit")
        if raw is None:
            return self.page_size
        try:
            size = int(raw)
        except ValueError:
            raise exceptions.ValidationError({"limit": ["must be an integer"]}) from None
        if not 1 <= size <= self.max_page_size:
            raise exceptions.ValidationError(
                {"limit": [f"must be between 1 and {self.max_page_size}"]}
            )
        return size

    def decode_cursor(self, request: Request):
        """The cursor, or a 400 naming it: one that is not ours (DRF's own answer is a 404) or
        whose position is no time (the database would be asked to read it as one)."""
        invalid = exceptions.ValidationError({"cursor": ["is not a cursor this list gave"]})
        try:
            cursor = super().decode_cursor(request)
        except exceptions.NotFound:
            raise invalid from None
        if cursor is not None and cursor.position is not None:
            try:
                when = parse_datetime(cursor.position)
            except ValueError:
                when = None
            if when is None:
                raise invalid
        return cursor

    def cursor_param_value(self, link: str | None) -> str | None:
        if not link:
            return None
        return parse_qs(urlparse(link).query).get(self.cursor_query_param, [None])[0]
