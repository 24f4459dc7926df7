"""Dashboard accounts: a user with a password, made or updated without prompts, so scripts
(and `make demo`) can make a sign-in people can use at once."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.password_validation import validate_password

# A generated password: 16 URL-safe characters, about 96 bits.
GENERATED_PASSWORD_BYTES = 12


def password_generate() -> str:
    return secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)


def user_set_password(
    *, username: str, password: str | None = None
) -> tuple[AbstractBaseUser, str]:
    """Create user `username` if needed and give it `password` (a generated one when None);
    returns the user and the password. A given password must pass Django's validators
    (ValidationError otherwise)."""
    if password is None:
        password = password_generate()
    user, _ = get_user_model().objects.get_or_create(username=username)
    validate_password(password, user)
    user.set_password(password)
    user.is_active = True
    user.save()
    return user, password
