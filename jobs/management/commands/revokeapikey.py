from django.core.management.base import BaseCommand, CommandError

from jobs.apikeys import api_key_revoke


class Command(BaseCommand):
    help = "Revoke the API key with the given prefix (the 8 characters after 'ehk_')."

    def add_arguments(self, parser):
        parser.add_argument("prefix")

    def handle(self, *args, prefix: str, **options):
        prefix = prefix.removeprefix("ehk_").split("_")[0]
        key = api_key_revoke(prefix=prefix)
        if key is None:
            raise CommandError(f"no API key with prefix {prefix!r}")
        self.stdout.write(f"Revoked API key {key.prefix}… of user {key.user}.")
