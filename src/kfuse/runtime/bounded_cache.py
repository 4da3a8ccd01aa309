"""BoundedCache: the in-process caches of loaded kernels, each of at most a fixed size.

A process that compiles kernel after kernel (a campaign worker, a property-test run) must not
keep every one loaded: each CUDA module holds device memory, and each emulated kernel is a
shared library with its own memory mappings, of which Linux allows a process 65530
(vm.max_map_count). An emulator campaign worker that kept them all reached that limit after
about 11,000 kernels, and every later mmap failed (MemoryError, "out of host memory"). A
kernel dropped from a cache stays loaded while a Program uses it; once nothing does, the
CUDA module is unloaded (kfuse._C.Kernel's destructor) and the emulated library closed
(kfuse.runtime.emulator.build)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

LOADED_KERNELS = 1024
"""Kernels each cache keeps loaded besides those that live Programs hold."""


class BoundedCache(Generic[K, V]):
    """A thread-safe map of at most `limit` entries, dropping the least recently used."""

    def __init__(self, limit: int = LOADED_KERNELS) -> None:
        self.limit = limit
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value of `key` (now the most recently used), or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Keep `value` for `key`, dropping the least recently used beyond the limit."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
