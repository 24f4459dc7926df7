"""The embedded default's broker: kombu's file-system transport, each message written whole.

kombu writes a message straight into the queue folder, and a consumer polling that folder may
take the file before its writer has finished with it (the consumer moves it away without
waiting for the writer's lock): it reads an empty or partial message, and the worker's
consumer stops on a JSONDecodeError. Here a message is written under a name no consumer
looks at and renamed into place, which is atomic within one file system.

A consumer takes a message by renaming it within its folder, which one consumer alone can do.
kombu moves it to the temporary directory instead: where that is another file system (a tmpfs
/tmp), the move is a copy, and two consumers copying one message to one name read it empty (the
consumer stops again) or lose it.

kombu also keeps each exchange's bindings in a file it rewrites in place, so a process
publishing while another binds could read it empty: a JSONDecodeError, or no queue at all and the
message dropped. Here the table is replaced whole under a lock of its own, and a reader also sees
the bindings its own process has declared.

A consumer killed between taking a message and removing it leaves it taken (`.<name>.<id>.taken`):
such a file is put back in its queue once it has been taken for `taken_stale_s` (the rename
that took it set its change time), so the message is delivered again rather than lost (a
`jobs.job_run` delivered twice joins the runner already there).

An idle worker looks for a message every `polling_interval` seconds (one directory listing):
kombu's 1 s was a second added to the start of each job and runner slice.
"""

from __future__ import annotations

import os
import shutil
import uuid
from queue import Empty
from time import monotonic, time

from kombu.exceptions import ChannelError
from kombu.transport import filesystem, virtual
from kombu.transport.filesystem import LOCK_EX, exchange_queue_t, lock
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads


class Channel(filesystem.Channel):
    # A message taken this long ago and still in the folder lost its consumer (see above).
    taken_stale_s = 60.0

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

    def _get(self, queue):
        wanted = f"{queue}.msg"
        folder = self.data_folder_in
        names = os.listdir(folder)
        for name in names:
            if name.endswith(".taken"):
                self._put_back_if_stale(folder, name)
        for name in sorted(names):
            if name.partition(".")[2] != wanted:
                continue
            taken = os.path.join(folder, f".{name}.{uuid.uuid4().hex}.taken")  # never a queue's
            try:
                os.rename(os.path.join(folder, name), taken)
            except OSError:  # another consumer took it first
                continue
            try:
                with open(taken, "rb") as f:
                    payload = f.read()
                if self.store_processed:
                    shutil.move(taken, os.path.join(self.processed_folder, name))
                else:
                    os.remove(taken)
            except FileNotFoundError:  # put back as stale meanwhile: read again from there
                continue
            except OSError as exc:
                raise ChannelError(f"Cannot read file {taken!r} from queue.") from exc
            return loads(bytes_to_str(payload))
        raise Empty()

    def _put_back_if_stale(self, folder: str, name: str) -> None:
        """Return a message its consumer took `taken_stale_s` ago or more to its queue, under
        its own name (the next `_get` reads it; another consumer may put it back first)."""
        taken = os.path.join(folder, name)
        try:
            if time() - os.stat(taken).st_ctime >= self.taken_stale_s:
                os.rename(taken, os.path.join(folder, name[1:].rsplit(".", 2)[0]))
        except OSError:  # read and removed meanwhile, or put back by another consumer
            pass

    def get_table(self, exchange):
        """The bindings in the exchange's file and those this process has declared (kombu keeps
        one state for all of a process's connections), whose file write another thread may
        still be making."""
        table = _stored(self._exchange_file(exchange))
        for meta in self.state.exchanges.get(exchange, {}).get("table", []):
            entry = _entry(*meta)
            held = self.state.has_binding(entry.queue, exchange, entry.routing_key)
            if held and entry not in table:
                table.append(entry)
        return table

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        entry = _entry(routing_key, pattern, queue)
        self._edit_table(exchange, lambda table: table if entry in table else [entry, *table])

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        # virtual's purge only: kombu's file-system channel also rewrites the table in place
        virtual.Channel._delete(self, queue, exchange, routing_key, pattern, *args, **kwargs)
        entry = _entry(routing_key, pattern, queue)
        self._edit_table(exchange, lambda table: [kept for kept in table if kept != entry])

    def _edit_table(self, exchange, edit) -> None:
        """Rewrite one exchange's table under its lock file, replacing the table whole."""
        file = self._exchange_file(exchange)
        try:
            self.control_folder.mkdir(parents=True, exist_ok=True)
            with open(f"{file}.lock", "ab") as held:
                lock(held, LOCK_EX)  # released as the file closes
                before = _stored(file)
                after = edit(before)
                if after != before:
                    partial = file.with_name(f".{file.name}.{uuid.uuid4()}.partial")
                    partial.write_bytes(str_to_bytes(dumps(after)))
                    os.replace(partial, file)
        except OSError as exc:
            raise ChannelError(f"Cannot update {file}") from exc


def _entry(routing_key, pattern, queue) -> exchange_queue_t:
    """A binding as the table file holds it (kombu's in-memory ones say None for "")."""
    return exchange_queue_t(routing_key or "", pattern or "", queue or "")


def _stored(file) -> list:
    try:
        return [exchange_queue_t(*entry) for entry in loads(bytes_to_str(file.read_bytes()))]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ChannelError(f"Cannot open {file}") from exc


class Transport(filesystem.Transport):
    Channel = Channel
    polling_interval = 0.1
