"""What is kept of a job beside its samples: its numbered events (`JobEvent`, what clients
follow) and the figures computed from all its rows (`JobFigures`)."""

from __future__ import annotations

from django.db import models

from jobs.models.jobs import EvalJob


class JobEvent(models.Model):
    job = models.ForeignKey(EvalJob, models.CASCADE, related_name="events", db_index=False)
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=64)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job", "seq"]
        constraints = [models.UniqueConstraint(fields=["job", "seq"], name="job_event_unique_seq")]


class JobFigures(models.Model):
    """Figures computed from every row of a job (`jobs.figures`), kept so that reading a big job
    does not recompute them: `name` says which (the results summary, the per-seed figures, the
    dashboard's charts), `settled` that the job had ended and no sample could change any more."""

    job = models.ForeignKey(EvalJob, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=32)
    # JSON text, not a JSONField: PostgreSQL's jsonb would reorder the keys of what is served.
    value = models.TextField()
    settled = models.BooleanField(default=False)
    computed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "name"], name="job_figures_unique_name")
        ]
