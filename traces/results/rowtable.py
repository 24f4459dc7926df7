"""Result rows kept as tuples (a third of the memory of dicts), for the passes over every row of
a big job (`traces.results.result_rows.kept_figures`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any


class RowTable(Sequence):
    """Result rows kept as tuples, read back as dicts: what `summarize` iterates over."""

    def __init__(self, rows: Iterable[dict[str, Any]]):
        self.keys: tuple[str, ...] = ()
        self.values: list[tuple] = []
        for row in rows:
            if not self.keys:
                self.keys = tuple(row)
            self.values.append(tuple(row.values()))

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [dict(zip(self.keys, v, strict=True)) for v in self.values[index]]
        return dict(zip(self.keys, self.values[index], strict=True))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        keys = self.keys
        for values in self.values:
            yield dict(zip(keys, values, strict=True))
