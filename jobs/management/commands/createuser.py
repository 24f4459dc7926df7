import sys

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from jobs.accounts import user_set_password


class Command(BaseCommand):
    help = (
        "Create dashboard user NAME (or update its password) without prompts. The password is "
        "read from stdin with --password-stdin, else generated and printed on the last line."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="user name (created if it does not exist)")
        parser.add_argument(
            "--password-stdin", action="store_true", help="read the password from stdin"
        )

    def handle(self, *args, name: str, password_stdin: bool, **options):
        password = read_password(password_stdin)
        try:
            _, password = user_set_password(username=name, password=password)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        if password_stdin:
            self.stdout.write(f"User {name!r} can sign in to the dashboard with that password.")
        else:
            self.stdout.write(f"User {name!r} can sign in to the dashboard with this password:")
            self.stdout.write(password)


def read_password(from_stdin: bool) -> str | None:
    """The first line of stdin (without its line end), or None to have one generated."""
    if not from_stdin:
        return None
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CommandError("--password-stdin: stdin gave no password")
    return password
