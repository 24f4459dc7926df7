"""Fewer indexes written per rollout: none of its own on a foreign key that a constraint or
index leads with, partial ones on columns most rows leave empty, and unique constraints
instead of `unique=True` on the attempts' text columns (no second index, for LIKE, on
PostgreSQL).

On PostgreSQL the attempts' unique indexes are kept as they are, renamed (`UniqueToConstraint`):
dropping and building them again would read and sort the whole attempts table, the biggest,
under a lock that stops every write to it while the upgrade runs."""

import django.db.models.deletion
from django.db import migrations, models


class UniqueToConstraint(migrations.operations.base.Operation):
    """`unique=True` on a text field becomes the unique constraint `name`. On PostgreSQL the
    field's own unique constraint is renamed (instant: its index is not built again) and its
    second index, for LIKE, dropped; elsewhere (SQLite remakes the table anyway) and backwards,
    the two operations Django would write."""

    reversible = True

    def __init__(self, model_name, field_name, name):
        self.model_name, self.field_name, self.name = model_name, field_name, name

    def deconstruct(self):
        kwargs = {"model_name": self.model_name, "field_name": self.field_name, "name": self.name}
        return self.__class__.__name__, [], kwargs

    def _operations(self):
        return [
            migrations.AlterField(
                model_name=self.model_name, name=self.field_name,
                field=models.CharField(max_length=64),
            ),
            migrations.AddConstraint(
                model_name=self.model_name,
                constraint=models.UniqueConstraint(fields=(self.field_name,), name=self.name),
            ),
        ]  # fmt: skip

    def state_forwards(self, app_label, state):
        for operation in self._operations():
            operation.state_forwards(app_label, state)

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            self._each(app_label, schema_editor, from_state, forwards=True)
            return
        model = to_state.apps.get_model(app_label, self.model_name)
        table, column = model._meta.db_table, model._meta.get_field(self.field_name).column
        (unique,) = schema_editor._constraint_names(
            model, [column], unique=True, primary_key=False
        )
        quote = schema_editor.quote_name
        schema_editor.execute(
            f"ALTER TABLE {quote(table)} RENAME CONSTRAINT {quote(unique)} TO {quote(self.name)}"
        )
        like = schema_editor._create_index_name(table, [column], suffix="_like")
        schema_editor.execute(schema_editor._delete_index_sql(model, like))

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        self._each(app_label, schema_editor, to_state, forwards=False)

    def _each(self, app_label, schema_editor, state, *, forwards):
        """The two operations one after the other, from `state` (the one before them)."""
        alter, add = self._operations()
        middle = state.clone()
        alter.state_forwards(app_label, middle)
        after = middle.clone()
        add.state_forwards(app_label, after)
        if forwards:
            alter.database_forwards(app_label, schema_editor, state, middle)
            add.database_forwards(app_label, schema_editor, middle, after)
        else:
            add.database_backwards(app_label, schema_editor, after, middle)
            alter.database_backwards(app_label, schema_editor, middle, state)

    def describe(self):
        return f"Unique {self.model_name}.{self.field_name} as the constraint {self.name}"


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0020_replay'),
    ]

    operations = [
        migrations.AlterField(
            model_name='jobevent',
            name='job',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='jobs.evaljob'),
        ),
        UniqueToConstraint(model_name='rolloutattempt', field_name='run_id', name='attempt_unique_run_id'),
        migrations.AlterField(
            model_name='rolloutattempt',
            name='seed_run',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='rollout_attempts', to='jobs.seedrun'),
        ),
        UniqueToConstraint(model_name='rolloutattempt', field_name='token_hash', name='attempt_unique_token_hash'),
        migrations.AlterField(
            model_name='seedrun',
            name='job',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='seed_runs', to='jobs.evaljob'),
        ),
        migrations.AlterField(
            model_name='seedrun',
            name='judge_token_hash',
            field=models.CharField(blank=True, default='', max_length=64),
        ),
        migrations.AlterField(
            model_name='seedrun',
            name='judged_rollout',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='jobs.rolloutattempt'),
        ),
        migrations.AlterField(
            model_name='seedrun',
            name='reused_from',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='jobs.seedrun'),
        ),
        migrations.AddIndex(
            model_name='seedrun',
            index=models.Index(condition=models.Q(('reused_from__isnull', False)), fields=['reused_from'], name='seedrun_reused_from'),
        ),
        migrations.AddIndex(
            model_name='seedrun',
            index=models.Index(condition=models.Q(('judge_token_hash', ''), _negated=True), fields=['judge_token_hash'], name='seedrun_judge_token'),
        ),
        migrations.AddIndex(
            model_name='seedrun',
            index=models.Index(condition=models.Q(('judged_rollout__isnull', False)), fields=['judged_rollout'], name='seedrun_judged_rollout'),
        ),
    ]
