from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from jobs.accounts import user_set_password
from jobs.apikeys import api_key_create_for_username
from jobs.management.commands.createuser import read_password


class Command(BaseCommand):
    help = (
        "Create user NAME if needed and a new API key for it; prints the key on the last line. "
        "With --password-stdin or --password the user can also sign in to the dashboard."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="user name (created if it does not exist)")
        parser.add_argument(
            "--label", default="", help="a label for the key (default: the user name)"
        )
        passwords = parser.add_mutually_exclusive_group()
        passwords.add_argument(
            "--password-stdin",
            action="store_true",
            help="also set the dashboard password, read from stdin",
        )
        passwords.add_argument(
            "--password",
            action="store_true",
            help="also set a generated dashboard password, and print it",
        )

    def handle(self, *args, name: str, label: str, password_stdin: bool, password: bool, **opts):
        if password_stdin or password:
            try:
                _, chosen = user_set_password(username=name, password=read_password(password_stdin))
            except ValidationError as exc:
                raise CommandError("; ".join(exc.messages)) from None
            if password:
                self.stdout.write(f"Dashboard password for {name!r}: {chosen}")
        key, plaintext = api_key_create_for_username(username=name, name=label)
        self.stdout.write(
            f"Created API key {key.prefix}… for user {name!r}. It is shown once; keep it safe:"
        )
        self.stdout.write(plaintext)
