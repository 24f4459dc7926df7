"""API keys: creation, lookup by bearer token, revocation.

A key reads `ehk_<prefix>_<secret>`. The prefix (8 hex chars) is stored and shown so people can
tell keys apart; only the SHA-256 of the whole key is stored, so a key is shown once, at creation.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from jobs.models import ApiKey

KEY_SCHEME = "ehk"
# Writing last_used_at on every request would make each API call a write; once a minute is enough.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def api_key_create(*, user: AbstractBaseUser, name: str = "") -> tuple[ApiKey, str]:
    """Create a key for `user`; returns the row and the plaintext key (shown once)."""
    prefix = secrets.token_hex(4)
    while ApiKey.objects.filter(prefix=prefix).exists():
        prefix = secrets.token_hex(4)
    plaintext = f"{KEY_SCHEME}_{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(user=user, name=name, prefix=prefix, key_hash=_hash(plaintext))
    return key, plaintext


def api_key_create_for_username(*, username: str, name: str = "") -> tuple[ApiKey, str]:
    user, _ = get_user_model().objects.get_or_create(username=username)
    return api_key_create(user=user, name=name or username)


def api_key_authenticate(*, plaintext: str) -> ApiKey | None:
    """The live key matching `plaintext`, or None. Records the use (at most once a minute)."""
    if not plaintext.startswith(f"{KEY_SCHEME}_"):
        return None
    key = (
        ApiKey.objects.select_related("user")
        .filter(key_hash=_hash(plaintext), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if key is None:
        return None
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key


def api_key_revoke(*, prefix: str, user: AbstractBaseUser | None = None) -> ApiKey | None:
    """Revoke the key with `prefix` (limited to `user`'s keys when given). None if no such key."""
    keys = ApiKey.objects.filter(prefix=prefix)
    if user is not None:
        keys = keys.filter(user=user)
    key = keys.first()
    if key is None:
        return None
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key
