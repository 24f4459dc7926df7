"""Joins a call's kind (policy or judge) and its route (wire format), made side by side."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0002_llmcall_kind"),
        ("traces", "0002_llmcall_route"),
    ]

    operations = []
