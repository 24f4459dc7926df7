from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="llmcall",
            name="route",
            field=models.CharField(default="chat.completions", max_length=32),
        ),
        migrations.AddField(
            model_name="llmcall",
            name="cache_write_tokens",
            field=models.BigIntegerField(blank=True, null=True),
        ),
    ]
