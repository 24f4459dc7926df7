"""The embedded default's broker (evalhub.filebroker): every message reaches one consumer, once
and whole, however many processes and threads publish, bind and consume at once."""

from __future__ import annotations

import collections
import queue as queues
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
from kombu import Connection, Exchange, Queue
from kombu.transport.virtual import BrokerState

from evalhub.filebroker import Channel, Transport

MESSAGES = 3000
BODY = "x" * 100_000


def _connection(folder, state: BrokerState | None = None) -> Connection:
    """A connection to the broker in `folder`. kombu keeps a process's declarations in one
    state for all its connections: `state` shared is two threads of a process, a fresh one
    (the default) a process of its own."""
    transport = type("Transport", (Transport,), {"global_state": state or BrokerState()})
    # control_folder too: kombu's default is "control" in the working directory.
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder),
               "control_folder": str(folder / "control"), "store_processed": False,
               "polling_interval": 0}  # fmt: skip
    return Connection("filesystem://", transport=transport, transport_options=options)


def _pass_through(folder, name: str, payloads: list, *, one_process=False, bind_together=False):
    """Sends `payloads` on queue `name` from this thread while a thread with a connection of
    its own takes them: what that thread received and what it met instead."""
    state = BrokerState() if one_process else None
    both_bound = threading.Barrier(2) if bind_together else None
    received: list = []
    failures: list[BaseException] = []

    def consume() -> None:
        try:
            with _connection(folder, state) as conn:
                if both_bound:
                    both_bound.wait(timeout=10)
                queue = conn.SimpleQueue(name)
                while len(received) < len(payloads):
                    message = queue.get(timeout=30)
                    received.append(message.payload)
                    message.ack()
        except BaseException as exc:  # noqa: BLE001 - reported by the tests
            failures.append(exc)

    consumer = threading.Thread(target=consume)
    consumer.start()
    with _connection(folder, state) as conn:
        if both_bound:
            both_bound.wait(timeout=10)
        queue = conn.SimpleQueue(name)
        for payload in payloads:
            queue.put(payload)
    consumer.join(timeout=60)
    return received, failures


def test_a_consumer_polling_while_messages_are_written_reads_each_whole(tmp_path):
    """kombu's own transport lets a consumer take a file still being written (it then reads an
    empty message and the worker's consumer stops); evalhub.filebroker renames it in whole."""
    sent = [{"i": i, "body": BODY} for i in range(MESSAGES)]
    received, failures = _pass_through(tmp_path, "race", sent)
    assert failures == []
    assert sorted(p["i"] for p in received) == list(range(MESSAGES))
    assert all(p["body"] == BODY for p in received)
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize("one_process", [False, True], ids=["two-processes", "two-threads"])
def test_connections_binding_one_queue_at_once_lose_no_message(tmp_path, one_process):
    """kombu rewrites an exchange's table in place: a publisher binding beside a consumer read
    it empty (a JSONDecodeError) or, in one process, before the other thread had written it
    (no queue, and the message dropped without a word)."""
    for round_ in range(20):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        received, failures = _pass_through(
            folder, "bound", list(range(20)), one_process=one_process, bind_together=True
        )
        assert failures == [], f"round {round_}"
        assert sorted(received) == list(range(20)), f"round {round_}"


def test_consumers_sharing_a_queue_take_each_message_once_wherever_the_temporary_directory(
    tmp_path, monkeypatch
):
    """kombu moved a message it took to the temporary directory: on another file system (a
    tmpfs /tmp) that is a copy, and two consumers copying one message to one name read it empty
    (a JSONDecodeError, which stops a worker's consumer) or lost it."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shm.stat().st_dev != tmp_path.stat().st_dev:
        monkeypatch.setattr(tempfile, "tempdir", str(shm))
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue("shared")
        for i in range(2000):
            queue.put({"i": i, "body": BODY})
    taken: collections.Counter[int] = collections.Counter()
    failures: list[BaseException] = []

    def consume() -> None:
        try:
            with _connection(tmp_path) as conn:
                queue = conn.SimpleQueue("shared")
                while True:
                    message = queue.get(timeout=2)
                    taken[message.payload["i"]] += 1
                    message.ack()
        except queues.Empty:
            pass  # the queue is drained
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    consumers = [threading.Thread(target=consume) for _ in range(3)]
    for consumer in consumers:
        consumer.start()
    for consumer in consumers:
        consumer.join(timeout=120)
    assert failures == []
    assert taken == collections.Counter(range(2000))
    assert [p.name for p in tmp_path.iterdir()] == ["control"]


def test_a_deleted_queue_leaves_the_exchange_and_the_other_queues_bound(tmp_path):
    exchange = Exchange("routes", type="direct")
    with _connection(tmp_path) as conn:
        channel = conn.channel()
        kept, gone = (Queue(name, exchange, routing_key=name, channel=channel) for name in "ab")
        kept.declare()
        gone.declare()
        assert {q.queue for q in channel.get_table("routes")} == {"a", "b"}
        gone.delete()
        assert [q.queue for q in channel.get_table("routes")] == ["a"]
    with _connection(tmp_path) as conn:  # as another process
        assert [q.queue for q in conn.channel().get_table("routes")] == ["a"]


def test_a_message_whose_consumer_died_holding_it_is_delivered_again(tmp_path, monkeypatch):
    """A consumer killed between taking a message (the rename) and removing it left it taken
    for ever: the job it carried waited for its redispatch. It goes back in its queue once it
    has been taken `taken_stale_s`; one taken more recently is a live consumer's, left alone."""
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue("orphans")
        for i in range(3):
            queue.put({"i": i})
        first = sorted(p for p in tmp_path.iterdir() if p.name.endswith(".orphans.msg"))[0]
        first.rename(tmp_path / f".{first.name}.{uuid.uuid4().hex}.taken")  # and then killed
        got = [queue.get(timeout=5) for _ in range(2)]
        for message in got:
            message.ack()
        with pytest.raises(queues.Empty):
            queue.get(timeout=0.5)
        assert len(list(tmp_path.glob(".*.taken"))) == 1
        monkeypatch.setattr(Channel, "taken_stale_s", 0.2)
        time.sleep(0.3)
        message = queue.get(timeout=5)
        message.ack()
        assert sorted(m.payload["i"] for m in (*got, message)) == [0, 1, 2]
        assert not list(tmp_path.glob(".*.taken"))
        with pytest.raises(queues.Empty):
            queue.get(timeout=0.5)
