"""LruFusionCache: nvFuser's decorator that shares executor caches among equal definitions.

    @LruFusionCache(max_fusions=100)
    def make(build):
        with FusionDefinition() as fd:
            build(fd)
        return fd

    fd = make(build)          # an equal definition made before hands fd its executor cache
    fd.execute(inputs)
    make.stats(), make.num_fusions()

The cache itself is kfuse.engine.fusion_cache.LRUCache (nvFuser's `LRUCache`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from kfuse.engine.fusion_cache import LRUCache
from kfuse.errors import DefinitionError
from kfuse.frontend import FusionDefinition


class LruFusionCache:
    """A decorator for a function that returns a FusionDefinition: each definition it
    returns gets the executor cache of an equal one returned before (LRUCache.cache_compile),
    unless it already has one."""

    def __init__(self, max_fusions: int = 16384) -> None:
        self.cache = LRUCache(max_fusions)

    def __call__(self, create_fusion_definition: Callable[..., Any]) -> Any:
        cache = self.cache

        @functools.wraps(create_fusion_definition)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            fd = create_fusion_definition(*args, **kwargs)
            if not isinstance(fd, FusionDefinition):
                raise DefinitionError(
                    f"LruFusionCache: {create_fusion_definition.__name__} returned "
                    f"{type(fd).__name__}, not a FusionDefinition"
                )
            if not hasattr(fd, "fec"):
                fd.fec = cache.cache_compile(fd.fusion)
                # As nvFuser: the definition keeps no fusion of its own once cached; its
                # `fusion` is the cache's from now on.
                del fd._fusion
            return fd

        wrapper.stats = cache.stats  # type: ignore[attr-defined]
        wrapper.num_fusions = cache.num_fusions  # type: ignore[attr-defined]
        return wrapper
