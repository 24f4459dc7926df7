"""Running a data migration in a test: the models as they were before it, then the step."""

from __future__ import annotations

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate_to(app: str, name: str):
    """Migrate `app` to its migration `name` (back or forward), the other apps staying at
    their latest; the models of that state."""
    executor = MigrationExecutor(connection)
    executor.migrate([(app, name)])
    executor.loader.build_graph()
    others = [node for node in executor.loader.graph.leaf_nodes() if node[0] != app]
    return executor.loader.project_state([*others, (app, name)]).apps


def migrate_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
