"""LRUCache: executor caches shared by equal definitions, the least recently used dropped.

nvFuser's direct bindings have it (`nvfuser_direct.LRUCache`, and the `LruFusionCache`
decorator over it): a program that rebuilds the same definition often (a test harness, a
function that writes its fusion on every call) asks it for the definition's executor cache
instead of compiling anew, and a definition equal to one it holds gets that one's cache,
with every kernel the cache compiled so far. Two definitions are equal when their fusions'
structures are (kfuse.ir.fusion.Fusion.structure: inputs with dtypes and layouts, exprs,
outputs, aliases; names ignored), so an equal definition computes the same thing.

    cache = LRUCache(max_fusions=100)
    fd.fec = cache.cache_compile(fd.fusion)   # fd.execute now runs the shared cache
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kfuse.errors import DefinitionError, InputError
from kfuse.ir.fusion import Fusion

if TYPE_CHECKING:
    from kfuse.engine.executor import FusionExecutorCache


@dataclass
class _Entry:
    executor: FusionExecutorCache
    hits: int = 0  # lookups this entry answered (nvFuser's "visits")


class LRUCache:
    """At most `max_fusions` executor caches, keyed by their definitions' structures."""

    def __init__(self, max_fusions: int) -> None:
        if isinstance(max_fusions, bool) or not isinstance(max_fusions, int) or max_fusions < 1:
            raise InputError(f"LRUCache: max_fusions must be a positive int, got {max_fusions!r}")
        self.max_fusions = max_fusions
        # The most recently used last (OrderedDict.move_to_end), so eviction pops the first.
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self._lookups = 0
        self._hits = 0
        # cache_compile from several threads: one lookup, insertion or eviction at a time.
        self._lock = threading.Lock()

    def cache_compile(self, fusion: Fusion) -> FusionExecutorCache:
        """The executor cache of a definition equal to `fusion`, made for it when none is held
        (then the least recently used entry goes where the cache is full)."""
        if not isinstance(fusion, Fusion):
            raise InputError(
                f"LRUCache.cache_compile: expected a finished definition's fusion (fd.fusion), "
                f"got {type(fusion).__name__}"
            )
        if fusion.in_definition or not fusion.outputs:
            raise DefinitionError(
                "LRUCache.cache_compile: the definition is not finished; leave its "
                "`with FusionDefinition() as fd:` block (with an output) before caching it"
            )
        key = fusion.structure()
        with self._lock:
            self._lookups += 1
            entry = self._entries.get(key)
            if entry is not None:
                self._hits += 1
                entry.hits += 1
                self._entries.move_to_end(key)
                return entry.executor
        from kfuse.engine.executor import FusionExecutorCache  # the compiler, on first use

        # Made outside the lock: canonicalizing a large definition takes milliseconds, and
        # other threads' lookups need not wait for it. Two threads making the same new entry
        # at once both count as compiles; the second one's is kept, as the most recent.
        executor = FusionExecutorCache(fusion)
        with self._lock:
            self._entries[key] = _Entry(executor)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_fusions:
                self._entries.popitem(last=False)
        return executor

    def num_fusions(self) -> int:
        """How many executor caches the cache holds."""
        with self._lock:
            return len(self._entries)

    def stats(self) -> str:
        """nvFuser's report, line for line: capacity, entries, compiles, each entry's hits
        from the most recently used, lookups, hits and the hit rate."""
        with self._lock:
            lines = [f"Max Fusions Allowed: {self.max_fusions}"]
            if not self._entries:
                return "\n".join([*lines, "The fusion cache is empty.", ""])
            lines += [
                f"Total Fusions in Cache: {len(self._entries)}",
                f"Total Unique Fusions Compiled: {self._lookups - self._hits}",
                "Cache Hits by LRU ordering:",
            ]
            newest_first = reversed(self._entries.values())
            lines += [f"\t{i} -> {entry.hits} hits" for i, entry in enumerate(newest_first)]
            # nvFuser streams a float: six significant digits, no trailing zeros ("%g").
            rate = 100.0 * self._hits / self._lookups if self._lookups else 0.0
            lines += [
                f"Cache Lookups: {self._lookups}",
                f"Cache Hits: {self._hits}",
                f"Hit Rate: {rate:g}%",
                "",
            ]
            return "\n".join(lines)
