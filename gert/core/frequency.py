"""Bounded counts of which graph keys are used, that decide which graphs a stream keeps: ``FrequencyWindow`` (the
auto policy's hotness and admission, gert/core/tiers.py) and ``SegmentedLRU`` (the exact policy's graph set,
gert/core/stream_graphs.py). Their own module so that the stream's graph table does not import the tiers, which
route over the streams' workers."""

from __future__ import annotations

import collections


class FrequencyWindow:
    """How often each key was seen within the last ``size`` additions (an exact sliding window)."""

    def __init__(self, size: int):
        self.size = size
        self._recent: collections.deque = collections.deque()
        self._counts: dict = {}

    def add(self, key) -> int:
        self._recent.append(key)
        n = self._counts[key] = self._counts.get(key, 0) + 1
        if len(self._recent) > self.size:
            old = self._recent.popleft()
            left = self._counts[old] - 1
            if left:
                self._counts[old] = left
            else:
                del self._counts[old]
            if old == key:
                n -= 1
        return n

    def count(self, key) -> int:
        return self._counts.get(key, 0)


class SegmentedLRU:
    """A bounded set of keys that resists scans (segmented LRU): a new key enters the probation segment; a hit there
    promotes it to the protected segment (the protected LRU falls back to probation when it is full). The victim is
    the oldest probation key, a protected one only when probation is empty."""

    def __init__(self, capacity: int):
        self.capacity = max(1, int(capacity))
        self.protected_cap = self.capacity - max(1, self.capacity // 5)
        self._probation: "collections.OrderedDict" = collections.OrderedDict()
        self._protected: "collections.OrderedDict" = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._probation) + len(self._protected)

    def __contains__(self, key) -> bool:
        return key in self._probation or key in self._protected

    def hit(self, key) -> None:
        if key in self._protected:
            self._protected.move_to_end(key)
        elif key in self._probation:
            del self._probation[key]
            self._protected[key] = None
            if len(self._protected) > self.protected_cap:
                self._probation[self._protected.popitem(last=False)[0]] = None

    def admit(self, key) -> list:
        """Add ``key`` (as probation); returns the keys evicted to make room. A key already held is a hit: it is
        never held twice (which would count it twice against the capacity and evict a live graph)."""
        if key in self:
            self.hit(key)
            return []
        victims = []
        while len(self) >= self.capacity:
            victims.append((self._probation or self._protected).popitem(last=False)[0])
        self._probation[key] = None
        return victims

    def discard(self, key) -> None:
        self._probation.pop(key, None)
        self._protected.pop(key, None)
