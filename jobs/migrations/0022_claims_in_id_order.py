"""A claim takes a job's first pending seeds by id (jobs.claim_statement). With the index on
(job, status) PostgreSQL read every pending seed of the job and sorted them, per claim: O(the
job's seeds) each time. With `id` last in the index they come in id order, and the claim reads
only those it takes."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0021_fewer_indexes_written'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='seedrun',
            name='jobs_seedru_job_id_9c51e5_idx',
        ),
        migrations.AddIndex(
            model_name='seedrun',
            index=models.Index(fields=['job', 'status', 'id'], name='seedrun_job_status_id'),
        ),
    ]
