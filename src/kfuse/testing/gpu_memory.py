"""Hand the GPU blocks that torch's and CuPy's caching allocators keep back to the driver.

Test runs and campaigns put several processes on one GPU (pytest-xdist workers, campaign
workers): the blocks one process keeps cached after a large example are memory the others'
allocations cannot have. On an H100 one GPU test's float64 reference ran out of memory beside
other workers' cached blocks, and a campaign worker kept 49 GB after an example that ran out
of memory, failing the other workers' later examples. Neither library is imported for it.
"""

from __future__ import annotations

import sys


def release_cached_gpu_memory() -> None:
    """Empty torch's CUDA cache (where CUDA is initialised) and CuPy's memory pools (where
    CuPy is imported)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()


__all__ = ["release_cached_gpu_memory"]
