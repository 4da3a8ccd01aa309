"""Where a kernel's random numbers start: the seed and Philox offsets of its RNG ops.

An RNG op is either stateless (its fusion gives `rng_seed` and `rng_offset` as Int scalar
inputs: the op draws with that seed at that Philox offset, the same numbers every call) or
stateful (no seed given). A kernel with stateful RNG ops takes, once per launch, the seed and
the offset of a generator and advances that generator's offset by 4 x its number of stateful
RNG ops; its k-th stateful op (in definition order, from 0) draws at Philox offset
offset // 4 + k. This is nvFuser's rule (its rng.cpp, "Divide offset by 4"): the generator's
offset counts 32-bit words, as torch's Philox generators do, and one Philox call gives four,
so each op has one Philox offset of its own per launch. Hence after torch.manual_seed(s),
whose offset starts at 0, the i-th launch of a kernel with one RNG op draws what the stateless
op draws with rng_seed=s, rng_offset=i.

The generator is torch's default CUDA generator of the device for torch CUDA tensors (so that
torch.manual_seed and torch.cuda.get_rng_state govern kfuse's draws as they govern torch's),
and kfuse's own generator (`kfuse.manual_seed`) for everything else: CuPy and NumPy arrays,
CPU torch tensors (torch's CPU generator has no offset), fusions without tensor inputs that
run on the emulator. Nothing here touches CUDA before a torch CUDA tensor asks for it.

Under CUDA graph capture a stateful op is refused (torch_cuda_generator). A captured launch
keeps the argument values it was captured with, so a kernel that takes the seed and offset
by value would draw the capture's numbers on every replay. torch's own kernels (and
nvFuser's) take them by device pointer there: CUDAGeneratorImpl::philox_cuda_state returns,
while capturing, pointers to two device words that the graph's replay fills with the
generator's seed and offset before each replay, plus the offset within the graph, and
at::cuda::philox::unpack reads them in the kernel. torch gives C++ code alone that call:
its Python Generator has initial_seed, get_offset and set_offset (host values, read at
capture), get_state and set_state (host bytes), and graphsafe_get_state, graphsafe_set_state
and clone_state (whole generator states to register with a CUDAGraph); none gives the two
device pointers or the intra-graph offset, and kfuse's extension does not link libtorch as
nvFuser's does. Building it needs (1) a C++ call of philox_cuda_state(4 x ops) under the
generator's mutex (a torch C++ extension, or _C linked with libtorch_cuda) and (2) a second
kernel variant taking the two pointers and the intra-graph offset, compiled and loaded
before capture begins (a module load is not a capturable operation); the by-value kernels
stay as they are.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple, Protocol

from kfuse.errors import InputError
from kfuse.runtime.capture import refuse_under_capture

WORDS_PER_PHILOX_CALL = 4
_UINT64 = (1 << 64) - 1


class OffsetGenerator(Protocol):
    """What reserve() needs of a generator: torch.Generator's methods of these names."""

    def initial_seed(self) -> int: ...

    def get_offset(self) -> int: ...

    def set_offset(self, offset: int) -> Any: ...


class PhiloxStart(NamedTuple):
    """A launch's seed and the Philox offset of its first stateful RNG op."""

    seed: int
    offset: int

    def op_offset(self, k: int) -> int:
        """The Philox offset of the k-th stateful RNG op (from 0) of the kernel."""
        return self.offset + k


class KfuseGenerator:
    """kfuse's own Philox generator for arrays torch's CUDA generators do not govern: a seed
    and an offset in 32-bit words, with torch.Generator's method names."""

    def __init__(self, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self._seed = seed & _UINT64
        self._offset = 0

    def manual_seed(self, seed: int) -> KfuseGenerator:
        """Restart the sequence: this seed, offset 0 (as torch.manual_seed does)."""
        seed = _as_seed(seed)
        with self._lock:
            self._seed = seed
            self._offset = 0
        return self

    def initial_seed(self) -> int:
        return self._seed

    def get_offset(self) -> int:
        return self._offset

    def set_offset(self, offset: int) -> None:
        if offset < 0 or offset % WORDS_PER_PHILOX_CALL:
            raise InputError(f"a generator's offset is a non-negative multiple of 4, not {offset}")
        self._offset = offset

    def reserve(self, words: int) -> tuple[int, int]:
        """(seed, offset) now, the offset advanced by `words`, in one step for every thread."""
        with self._lock:
            start = self._offset
            self._offset = start + words
            return self._seed, start


def _as_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"a seed is an int, not {type(seed).__name__}")
    # torch takes negative seeds as their two's complement; so does kfuse.
    if not -(1 << 63) <= seed <= _UINT64:
        raise InputError(f"a seed fits in 64 bits; {seed} does not")
    return seed & _UINT64


_KFUSE_GENERATOR = KfuseGenerator()


def kfuse_generator() -> KfuseGenerator:
    """The generator of stateful RNG ops on anything but torch CUDA tensors."""
    return _KFUSE_GENERATOR


def manual_seed(seed: int) -> None:
    """Seed kfuse's own generator (offset back to 0): the stateful random numbers of fusions
    on CuPy and NumPy arrays (and CPU torch tensors) are then those of the stateless ops with
    rng_seed=seed and the offsets that follow (see this module's docstring). Fusions on torch
    CUDA tensors draw from torch's generator: seed those with torch.manual_seed."""
    _KFUSE_GENERATOR.manual_seed(seed)


_OUTSIDE_OR_SEEDED = (
    "Run the fusion outside the graph, or give its random ops rng_seed and rng_offset "
    "(scalar inputs; a replay then draws the numbers of the values captured)"
)
"""What a stateful random op refused under capture can do instead."""


def torch_cuda_generator(device: int) -> OffsetGenerator:
    """torch's default CUDA generator of device `device` (CUDA is already initialised when a
    torch CUDA tensor exists; torch.cuda.init() makes sure default_generators is filled)."""
    import torch

    # Captured, a launch would replay the offset read at capture time on every replay; the
    # device pointers torch's kernels read instead are C++ only (this module's docstring).
    refuse_under_capture(
        "torch",
        device,
        "random ops without rng_seed and rng_offset cannot run: every replay must read "
        "torch's seed and offset through device pointers, which torch gives to C++ code only "
        "(CUDAGeneratorImpl::philox_cuda_state), so a captured kfuse kernel would draw the "
        "capture's numbers again on every replay",
        _OUTSIDE_OR_SEEDED,
    )
    torch.cuda.init()
    generators = torch.cuda.default_generators
    if not 0 <= device < len(generators):
        raise InputError(f"torch has no default CUDA generator for device {device}")
    return generators[device]  # type: ignore[no-any-return]


def reserve(generator: OffsetGenerator, rng_ops: int) -> PhiloxStart:
    """Take a launch's start from `generator` and advance it past the launch's `rng_ops`
    stateful RNG ops (4 words each)."""
    if rng_ops <= 0:
        raise ValueError(f"a launch reserves offsets for at least one RNG op, not {rng_ops}")
    words = WORDS_PER_PHILOX_CALL * rng_ops
    if isinstance(generator, KfuseGenerator):
        seed, start = generator.reserve(words)
    else:
        seed, start = generator.initial_seed(), generator.get_offset()
        generator.set_offset(start + words)
    return PhiloxStart(seed & _UINT64, start // WORDS_PER_PHILOX_CALL)


def generator_for(framework: str | None, device: int) -> OffsetGenerator:
    """The generator a launch on arrays of `framework` ("torch", "cupy", "numpy", or None for
    a fusion without tensor inputs) on `device` (a CUDA ordinal, -1 for host memory) draws
    from."""
    if framework == "torch" and device >= 0:
        return torch_cuda_generator(device)
    # The same reason as torch_cuda_generator's: a captured launch keeps the seed and offset
    # it was captured with, and kfuse's generator has no device copy for a replay to read.
    refuse_under_capture(
        framework,
        device,
        "random ops without rng_seed and rng_offset take their seed and offset from kfuse's "
        "generator when launched, so a captured kernel would draw the capture's numbers "
        "again on every replay",
        _OUTSIDE_OR_SEEDED,
    )
    return _KFUSE_GENERATOR
