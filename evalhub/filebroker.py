"""The embedded default's broker: kombu's file-system transport, each message written whole.

kombu writes a message straight into the queue folder, and a consumer polling that folder may
take the file before its writer has finished with it (the consumer moves it away without
waiting for the writer's lock): it reads an empty or partial message, and the worker's
consumer stops on a JSONDecodeError. Here a message is written under a name no consumer
looks at and renamed into place, which is atomic within one file system.

An idle worker looks for a message every `polling_interval` seconds (one directory listing):
kombu's 1 s was a second added to the start of each job and runner slice.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{name}.partial")  # never a queue's
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
    polling_interval = 0.1
