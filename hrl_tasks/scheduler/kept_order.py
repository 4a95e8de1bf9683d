"""Items kept in the order of a key that changes: the first in O(log n), not a scan.

The ledger asks "which worker first?" for every object it places; the answer
changes by one worker at a time (what it holds went up or down). `KeptOrder` is a
heap where a change pushes a new entry and an entry older than its item's latest is
dropped when it comes to the top (and every stale one at once when they outnumber
the live).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable
from typing import Any


class KeptOrder:
    """Items ordered by their keys (any comparable values, unique per item)."""

    def __init__(self):
        self._heap: list[tuple[Any, Hashable]] = []
        self._latest: dict[Hashable, tuple[Any, Hashable]] = {}

    def set(self, item: Hashable, key) -> None:
        """``item`` is (now) ordered by ``key``."""
        entry = self._latest.get(item)
        if entry is not None and entry[0] == key:
            return
        entry = (key, item)
        self._latest[item] = entry
        heapq.heappush(self._heap, entry)
        if len(self._heap) > 2 * len(self._latest) + 64:
            self._heap = sorted(self._latest.values())  # a sorted list is a heap

    def remove(self, item: Hashable) -> None:
        """Forget ``item`` (its entries in the heap are dropped as they surface)."""
        self._latest.pop(item, None)

    def keys(self) -> dict:
        """Every item's key."""
        return {item: entry[0] for item, entry in self._latest.items()}

    def first(self, skip: Iterable[Hashable] = ()) -> Hashable | None:
        """The item with the least key, ``skip`` left out; None if there is none."""
        skipped = skip if isinstance(skip, (set, frozenset)) else set(skip)
        heap, set_aside, found = self._heap, [], None
        while heap:
            entry = heap[0]
            if self._latest.get(entry[1]) is not entry:
                heapq.heappop(heap)  # stale: its item changed since, or went
            elif entry[1] in skipped:
                set_aside.append(heapq.heappop(heap))
            else:
                found = entry[1]
                break
        for entry in set_aside:
            heapq.heappush(heap, entry)
        return found
