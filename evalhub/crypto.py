"""Encryption at rest for secrets we must be able to read back (a job's task app key).

The Fernet key is derived from SECRET_KEY, so rotating SECRET_KEY makes stored task-app keys
unreadable: jobs created before the rotation fail their rollouts with a clear error.
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


@cache
def _fernet() -> Fernet:
    digest = hashlib.sha256(b"evalhub.secret-at-rest:" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(ciphertext: str) -> str:
    try:
        return _fernet().decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        raise ValueError("stored secret cannot be decrypted with the current SECRET_KEY") from None
