"""How the API picks its answer's format: DRF's negotiation, but an unknown `?format=` is a 400
naming `format` (DRF answers a 404, "Not found.", as if the job did not exist)."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation


class FormatNamedNegotiation(DefaultContentNegotiation):
    def filter_renderers(self, renderers, format):
        found = [renderer for renderer in renderers if renderer.format == format]
        if not found:
            known = ", ".join(sorted({renderer.format for renderer in renderers}))
            raise exceptions.ValidationError({"format": [f"must be one of: {known}"]})
        return found
