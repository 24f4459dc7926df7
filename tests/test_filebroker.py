"""The embedded default's broker: a message is never read before it is written whole."""

from __future__ import annotations

import threading

from kombu import Connection

MESSAGES = 3000
BODY = "x" * 100_000
TRANSPORT = "evalhub.filebroker:Transport"


def _connection(folder, transport: str) -> Connection:
    # control_folder too: kombu's default is "control" in the working directory.
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder),
               "control_folder": str(folder / "control"), "store_processed": False,
               "polling_interval": 0}  # fmt: skip
    return Connection("filesystem://", transport=transport, transport_options=options)


def _pass_through(folder, name: str, payloads: list, *, bind_together: bool = False):
    """Sends `payloads` on queue `name` from this thread while a thread with a connection of
    its own takes them: what that thread received and what it met instead."""
    both_bound = threading.Barrier(2) if bind_together else None
    received: list = []
    failures: list[BaseException] = []

    def consume() -> None:
        try:
            with _connection(folder, TRANSPORT) as conn:
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
    with _connection(folder, TRANSPORT) as conn:
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


def test_connections_binding_one_queue_at_once_lose_no_message(tmp_path):
    """kombu rewrites an exchange's table in place: a publisher binding beside a consumer could
    read it empty (a JSONDecodeError, or no queue and the message dropped without a word)."""
    for round_ in range(20):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        received, failures = _pass_through(folder, "bound", list(range(20)), bind_together=True)
        assert failures == [], f"round {round_}"
        assert sorted(received) == list(range(20)), f"round {round_}"


def test_a_deleted_queue_leaves_the_exchange_and_the_other_queues_bound(tmp_path):
    from kombu import Exchange, Queue

    exchange = Exchange("shared", type="direct")
    with _connection(tmp_path, TRANSPORT) as conn:
        channel = conn.channel()
        kept, gone = (Queue(name, exchange, routing_key=name, channel=channel) for name in "ab")
        kept.declare()
        gone.declare()
        assert {q.queue for q in channel.get_table("shared")} == {"a", "b"}
        gone.delete()
        assert [q.queue for q in channel.get_table("shared")] == ["a"]
    with _connection(tmp_path, TRANSPORT) as conn:  # as another process
        assert [q.queue for q in conn.channel().get_table("shared")] == ["a"]
