"""The scrape's reading of the processes' value files (evalhub.metrics)."""

from __future__ import annotations

from prometheus_client.multiprocess import MultiProcessCollector

from evalhub import metrics


def test_a_file_a_process_is_creating_is_left_out_of_the_scrape(tmp_path):
    """A process's value file is empty until the process sizes it: prometheus_client's merge
    raises on it, so a scrape in that moment answered 500. The scrape reads the others."""
    host = tmp_path / "host-a"
    host.mkdir()
    (host / "counter_999.db").touch()  # being created
    sized = host / "counter_998.db"
    sized.write_bytes((8).to_bytes(4, "little") + bytes(4))  # sized, no value yet
    assert metrics.readable_files(tmp_path) == [str(sized)]
    assert list(MultiProcessCollector.merge(metrics.readable_files(tmp_path))) == []
