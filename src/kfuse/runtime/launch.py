"""GeneratedKernel and KernelLaunch: one kernel of a compiled fusion, with where each argument
comes from.

A scheduler generates GeneratedKernels (source, name, launch configuration, operands) once per
input signature without compiling anything; the compiler's compile stage turns each into a
KernelLaunch (the same with the loaded kernel). The executor fills in the pointers (and the
values of scalars) on every call, so a cached call does no planning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kfuse.dtypes import DataType
from kfuse.ir.values import Scalar
from kfuse.runtime.kernel_args import TensorArg

if TYPE_CHECKING:
    from kfuse.schedule.types import SchedulerType


@dataclass(frozen=True)
class InputOperand:
    """Input `position`'s data from `byte_offset` bytes past its first element (a slice of
    it), seen through `shape`/`strides`."""

    position: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    byte_offset: int = 0


@dataclass(frozen=True)
class GeneratedOperand:
    """A generated read's kf::Tensor (kfuse.codegen.generated): no data, `shape`/`strides`
    (the strides of the generated tensor's own contiguous layout) only."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class OutputOperand:
    """Output `index`'s data from `byte_offset` bytes past its first element (a part of it
    a kernel writes: a cat's), seen through `shape`/`strides`."""

    index: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    byte_offset: int = 0


@dataclass(frozen=True)
class ScalarOperand:
    """A non-constant Scalar of the fusion (an input, or computed from sizes)."""

    val: Scalar


@dataclass(frozen=True)
class WorkspaceOperand:
    """Scratch memory the executor allocates per call (e.g. a grid reduction's partials):
    bytes [offset, offset + nbytes) of workspace buffer `index`, seen as a tensor of
    `shape`/`strides` (in elements). Every launch of one call sees the same buffers."""

    index: int
    offset: int
    nbytes: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class IndexCheckOperand:
    """The flags a kernel's indexed reads write a position outside its axis into
    (kfuse.runtime.index_checks.IndexChecks): four words of mapped host memory, the same on
    every call, made on the first launch for the call's framework and device."""

    checks: Any  # kfuse.runtime.index_checks.IndexChecks


@dataclass(frozen=True)
class RngStateOperand:
    """The seed (`part` "seed") or the Philox offset of the first op ("offset") of a kernel
    with `ops` stateful RNG ops: taken from the generator of the call's framework and device
    at each launch, which advances it past those ops (kfuse.runtime.rng_state.reserve); one
    reservation gives both parameters. Never cached: the fast path leaves such kernels to
    the checked path."""

    ops: int
    part: str


Operand = (
    InputOperand
    | GeneratedOperand
    | OutputOperand
    | ScalarOperand
    | WorkspaceOperand
    | IndexCheckOperand
    | RngStateOperand
)


@dataclass
class GeneratedKernel:
    """A kernel a scheduler generated for one input signature, not compiled yet: its CUDA
    source and name, the spec codegen emitted it from (shown by dumps), and its launch."""

    name: str
    source: str = field(repr=False)
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    operands: list[Operand]
    scheduler: SchedulerType
    spec: Any = field(repr=False, default=None)

    @property
    def threads(self) -> int:
        """Threads in one block."""
        return self.block[0] * self.block[1] * self.block[2]

    def loaded(self, kernel: Any) -> KernelLaunch:
        """The launch of this kernel once compiled and loaded as `kernel`."""
        return KernelLaunch(
            kernel,
            self.grid,
            self.block,
            self.shared_mem,
            self.operands,
            self.scheduler,
            self.source,
            self.name,
        )


@dataclass
class KernelLaunch:
    """A kernel and how to launch it."""

    kernel: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    operands: list[Operand]
    scheduler: SchedulerType
    source: str = field(repr=False, default="")
    name: str = ""

    def arguments(
        self,
        input_ptrs: list[int],
        output_ptrs: list[int],
        extents: dict[Any, Any],
        workspace_ptrs: list[int] | None = None,
        target: tuple[str, int] = ("numpy", -1),
    ) -> list[Any]:
        """The launch arguments for one call; `target`: its (framework, device index), which
        the flags of indexed reads live for."""
        args: list[Any] = []
        rng = _reserve(self.operands, target)
        for op in self.operands:
            if isinstance(op, RngStateOperand):
                assert rng is not None
                # the kernel takes the seed as a long long: its 64 bits, two's complement
                value = rng.seed - (1 << 64) if rng.seed >= 1 << 63 else rng.seed
                args.append(value if op.part == "seed" else rng.offset)
                continue
            if isinstance(op, IndexCheckOperand):
                args.append(TensorArg(op.checks.pointer(*target), (4,), (1,)))
                continue
            if isinstance(op, InputOperand):
                ptr = input_ptrs[op.position] + op.byte_offset
                args.append(TensorArg(ptr, op.shape, op.strides))
            elif isinstance(op, OutputOperand):
                ptr = output_ptrs[op.index] + op.byte_offset
                args.append(TensorArg(ptr, op.shape, op.strides))
            elif isinstance(op, GeneratedOperand):
                args.append(TensorArg(0, op.shape, op.strides))
            elif isinstance(op, WorkspaceOperand):
                assert workspace_ptrs is not None, "the executor allocates workspaces"
                args.append(TensorArg(workspace_ptrs[op.index] + op.offset, op.shape, op.strides))
            else:
                args.append(scalar_argument(op.val, extents[op.val]))
        return args


def _reserve(operands: list[Operand], target: tuple[str, int]) -> Any:
    """This launch's PhiloxStart where it has stateful RNG ops, else None."""
    ops = next((op.ops for op in operands if isinstance(op, RngStateOperand)), 0)
    if not ops:
        return None
    from kfuse.runtime import rng_state

    return rng_state.reserve(rng_state.generator_for(*target), ops)


def has_rng_state(launches: list[KernelLaunch]) -> bool:
    """Whether any of the launches draws from a generator (RngStateOperand)."""
    return any(isinstance(op, RngStateOperand) for ka in launches for op in ka.operands)


def index_checks_of(launches: list[KernelLaunch]) -> list[Any]:
    """The IndexChecks of the launches' indexed reads (kfuse.runtime.index_checks)."""
    return [op.checks for ka in launches for op in ka.operands if isinstance(op, IndexCheckOperand)]


def workspace_bytes(launches: list[KernelLaunch]) -> list[int]:
    """Bytes of each workspace buffer the launches use (index -> size)."""
    sizes: dict[int, int] = {}
    for launch in launches:
        for op in launch.operands:
            if isinstance(op, WorkspaceOperand):
                sizes[op.index] = max(sizes.get(op.index, 0), op.offset + op.nbytes)
    return [sizes.get(i, 0) for i in range(max(sizes, default=-1) + 1)]


WORKSPACE_ALIGNMENT = 256
"""Bytes each workspace of a pooled allocation starts at a multiple of: aligned for any
element type and vector width, as a framework's own allocation is."""


def pooled_workspaces(launches: list[KernelLaunch]) -> tuple[int, list[int]]:
    """A call's workspaces as one allocation: (its size in bytes, each workspace's byte
    offset in it). One allocation a call rather than one per workspace: each framework
    allocation costs a cached call about 1.5 us of host time (an H100's host; a fusion of
    three reductions has four workspaces)."""
    offsets, total = [], 0
    for n in workspace_bytes(launches):
        offsets.append(total)
        total += -(-n // WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT
    return total, offsets


def scalar_argument(val: Scalar, value: Any) -> Any:
    """A scalar as the kernel ABI passes it (Half/BFloat16 as float)."""
    if hasattr(value, "item"):
        value = value.item()
    if val.dtype is DataType.Bool:
        return bool(value)
    if val.dtype.is_integral:
        return int(value)
    return float(value)
