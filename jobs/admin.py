from django.contrib import admin, messages

from jobs.labels import job_label_count
from jobs.models import ApiKey, EvalJob, SampleLabel, SeedRun


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "name", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "key_hash"]


@admin.register(EvalJob)
class EvalJobAdmin(admin.ModelAdmin):
    list_display = ["id", "owner", "status", "num_seeds", "created_at", "completed_at"]
    list_filter = ["status"]
    exclude = ["task_app_api_key_encrypted"]

    def delete_view(self, request, object_id, extra_context=None):
        """The confirmation says how many labels, made by hand, go with the job."""
        job = self.get_object(request, object_id)
        if job is not None and request.method == "GET":
            count = job_label_count(job=job)
            messages.warning(
                request,
                f"{count} label(s) people made by hand on this job's samples go with it, for good."
                if count
                else "No label was made on this job's samples.",
            )
        return super().delete_view(request, object_id, extra_context)


@admin.register(SeedRun)
class SeedRunAdmin(admin.ModelAdmin):
    list_display = ["job", "seed", "status", "score", "attempts"]
    list_filter = ["status"]


@admin.register(SampleLabel)
class SampleLabelAdmin(admin.ModelAdmin):
    list_display = ["seed_run", "author", "verdict", "score", "updated_at"]
    list_filter = ["verdict"]
