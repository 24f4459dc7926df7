from django.contrib import admin

from jobs.models import ApiKey, EvalJob, SeedRun


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "name", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "key_hash"]


@admin.register(EvalJob)
class EvalJobAdmin(admin.ModelAdmin):
    list_display = ["id", "owner", "status", "num_seeds", "created_at", "completed_at"]
    list_filter = ["status"]
    exclude = ["task_app_api_key_encrypted"]


@admin.register(SeedRun)
class SeedRunAdmin(admin.ModelAdmin):
    list_display = ["job", "seed", "status", "score", "attempts"]
    list_filter = ["status"]
