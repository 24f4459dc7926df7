"""Running a data migration in a test: the models as they were before it, then the step."""

from __future__ import annotations

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader


def migrate_to(app: str, name: str):
    """Migrate `app` to its migration `name` (back or forward), the other apps staying at
    their latest but for what depends on a migration undone; the models of that state."""
    executor = MigrationExecutor(connection)
    executor.migrate([(app, name)])
    loader = MigrationLoader(connection)
    return loader.project_state(list(loader.applied_migrations)).apps


def migrate_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
