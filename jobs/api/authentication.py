"""DRF authentication: `Authorization: Bearer <api key>`."""

from __future__ import annotations

from rest_framework import authentication, exceptions

from jobs.apikeys import api_key_authenticate


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise exceptions.AuthenticationFailed(
                "Authorization header must be 'Bearer <api key>'."
            )
        key = api_key_authenticate(plaintext=token.strip())
        if key is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        return key.user, key

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) when credentials are missing.
        return 'Bearer realm="evalhub"'
