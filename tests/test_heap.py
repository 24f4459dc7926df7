"""A process's start-up heap frozen out of the collector's way, and a worker's young collections
made rarer (evalhub/heap.py)."""

from __future__ import annotations

import gc

import pytest

from evalhub.heap import startup_heap_freeze


@pytest.fixture
def collector_restored():
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_what_lives_at_start_up_is_frozen_and_the_thresholds_kept_by_default(collector_restored):
    before = gc.get_threshold()
    kept = [[n] for n in range(1000)]  # containers alive now: frozen, never scanned again
    assert startup_heap_freeze() >= len(kept)
    assert gc.get_threshold() == before  # the web process's: its pauses are the tail


def test_a_worker_s_young_collections_wait_for_its_threshold(collector_restored):
    _, older, oldest = gc.get_threshold()
    # Far above what the test allocates: threads of the session's servers allocate meanwhile.
    startup_heap_freeze(young_threshold=1_000_000)
    assert gc.get_threshold() == (1_000_000, older, oldest)
    collections = gc.get_stats()[0]["collections"]
    alive = [[n] for n in range(15_000)]  # a runner's rollouts in flight, say
    assert gc.get_stats()[0]["collections"] == collections  # not walked again and again
    assert len(alive) == 15_000
