from django.apps import AppConfig
from django.conf import settings


class EvalhubConfig(AppConfig):
    """The project itself: process set-up that must wait until settings are loaded."""

    name = "evalhub"
    verbose_name = "evalhub"

    def ready(self) -> None:
        # The embedded default keeps everything in EVALHUB_DATA_DIR; make its folders here,
        # once per process, rather than as a side effect of importing the settings.
        for folder in settings.EVALHUB_DATA_FOLDERS:
            folder.mkdir(parents=True, exist_ok=True)
