from django.core.management.base import BaseCommand

from jobs.apikeys import api_key_create_for_username


class Command(BaseCommand):
    help = "Create user NAME if needed and a new API key for it; prints the key on the last line."

    def add_arguments(self, parser):
        parser.add_argument("name", help="user name (created if it does not exist)")
        parser.add_argument(
            "--label", default="", help="a label for the key (default: the user name)"
        )

    def handle(self, *args, name: str, label: str, **options):
        key, plaintext = api_key_create_for_username(username=name, name=label)
        self.stdout.write(
            f"Created API key {key.prefix}… for user {name!r}. It is shown once; keep it safe:"
        )
        self.stdout.write(plaintext)
