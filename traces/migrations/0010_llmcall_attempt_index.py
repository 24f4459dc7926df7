"""An LLM call's attempt is indexed by (attempt, seq) alone: no second index written per call."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0021_fewer_indexes_written'),
        ('traces', '0009_llmcall_replay'),
    ]

    operations = [
        migrations.AlterField(
            model_name='llmcall',
            name='attempt',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='llm_calls', to='jobs.rolloutattempt'),
        ),
    ]
