"""python manage.py prunetraces [--days N] [--dry-run]"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from traces.retention import traces_prune


class Command(BaseCommand):
    help = (
        "Drop the heavy trace content (LLM call requests and responses, task app traces, stored "
        "zips) of terminal jobs finished more than N days ago. Jobs, results, usage and cost stay."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--days",
            type=int,
            default=None,
            help="age in days (default: EVALHUB_TRACE_RETENTION_DAYS; 0 there means keep forever)",
        )
        parser.add_argument("--dry-run", action="store_true", help="count, change nothing")

    def handle(self, *args, days: int | None, dry_run: bool, **options):
        if days is None:
            days = settings.EVALHUB_TRACE_RETENTION_DAYS
            if days == 0:
                self.stdout.write("EVALHUB_TRACE_RETENTION_DAYS is 0: traces are kept forever.")
                return
        if days < 0:
            raise CommandError("--days must be 0 or more")
        report = traces_prune(older_than_days=days, dry_run=dry_run)
        verb = "would prune" if dry_run else "pruned"
        self.stdout.write(
            f"{verb} {report.jobs} job(s) older than {days} day(s): {report.llm_calls} LLM "
            f"call(s), {report.task_traces} task app trace(s), {report.zip_files} zip file(s)"
        )
