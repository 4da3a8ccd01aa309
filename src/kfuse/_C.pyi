"""
kfuse's C++ core: lazy CUDA driver, NVRTC and CUPTI access, params, kernel launch, profiling. Importing it loads no CUDA library.
"""

from collections.abc import Mapping, Sequence
from typing import Final

import kfuse._errors_base
import kfuse.schedule.types


class ParamsError(kfuse._errors_base.KfuseError, ValueError, TypeError):
    """
    A launch, compile or heuristic parameter was given a value it cannot take (out of range, or of the wrong type); the message names the field.
    """

class CudaError(kfuse._errors_base.KfuseError):
    """
    A CUDA driver call failed, or the driver cannot be used. Attributes: code (the CUresult), name (e.g. 'CUDA_ERROR_INVALID_VALUE') and text (the driver's description).
    """

    code: None = None

    name: None = None

    text: None = None

class CompileError(kfuse._errors_base.KfuseError):
    """
    NVRTC could not compile a kernel, or could not be loaded. Attributes: log (NVRTC's log) and source; the message has both, with the source's lines numbered.
    """

    log: None = None

    source: None = None

class LaunchParams:
    """
    Grid and block dimensions and dynamic shared memory for a launch. Unset (None) dimensions are 1 at launch; grid_x and block_x must be given by compile-time or run-time constraints. Built without touching a device; checked against the device when a kernel is launched.
    """

    def __init__(self, *, grid_x: int | None = None, grid_y: int | None = None, grid_z: int | None = None, block_x: int | None = None, block_y: int | None = None, block_z: int | None = None, shared_mem: int = 0) -> None: ...

    @property
    def grid(self) -> tuple:
        """(x, y, z) grid dimensions with unset ones as 1."""

    @property
    def block(self) -> tuple:
        """(x, y, z) block dimensions with unset ones as 1."""

    @property
    def threads_per_block(self) -> int: ...

    def merged_with(self, other: LaunchParams) -> LaunchParams:
        """
        A copy with every dimension `other` sets (and a non-zero shared_mem) replaced.
        """

    def validate(self) -> None:
        """Raise ValueError for a dimension < 1 or a negative shared_mem."""

    def to_dict(self) -> dict: ...

    @staticmethod
    def from_dict(d: dict) -> LaunchParams: ...

    def __eq__(self, arg: LaunchParams, /) -> bool: ...

    def __ne__(self, arg: LaunchParams, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __repr__(self) -> str: ...

    def __copy__(self) -> LaunchParams: ...

    def __deepcopy__(self, memo: object) -> LaunchParams: ...

    @property
    def grid_x(self) -> int | None: ...

    @grid_x.setter
    def grid_x(self, value: object | None) -> None: ...

    @property
    def grid_y(self) -> int | None: ...

    @grid_y.setter
    def grid_y(self, value: object | None) -> None: ...

    @property
    def grid_z(self) -> int | None: ...

    @grid_z.setter
    def grid_z(self, value: object | None) -> None: ...

    @property
    def block_x(self) -> int | None: ...

    @block_x.setter
    def block_x(self, value: object | None) -> None: ...

    @property
    def block_y(self) -> int | None: ...

    @block_y.setter
    def block_y(self, value: object | None) -> None: ...

    @property
    def block_z(self) -> int | None: ...

    @block_z.setter
    def block_z(self, value: object | None) -> None: ...

    @property
    def shared_mem(self) -> int: ...

    @shared_mem.setter
    def shared_mem(self, value: object | None) -> None: ...

class CompileParams:
    """
    How a kernel is compiled: index_type ('int32' or 'int64'), maxrregcount (None: NVRTC decides), arch ('sm_90'...; None: the device's own), extra NVRTC options.
    """

    def __init__(self, *, index_type: str = 'int64', maxrregcount: int | None = None, arch: str | None = None, extra_options: Sequence[str] | None = None) -> None: ...

    @property
    def index_type(self) -> str: ...

    @index_type.setter
    def index_type(self, arg: object, /) -> None: ...

    def nvrtc_options(self) -> list[str]:
        """
        The NVRTC options these parameters add (the architecture is passed apart).
        """

    def validate(self) -> None: ...

    def to_dict(self) -> dict: ...

    @staticmethod
    def from_dict(d: dict) -> CompileParams: ...

    def __eq__(self, arg: CompileParams, /) -> bool: ...

    def __ne__(self, arg: CompileParams, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __repr__(self) -> str: ...

    def __copy__(self) -> CompileParams: ...

    def __deepcopy__(self, memo: object) -> CompileParams: ...

    @property
    def maxrregcount(self) -> int | None: ...

    @maxrregcount.setter
    def maxrregcount(self, value: object | None) -> None: ...

    @property
    def arch(self) -> str | None: ...

    @arch.setter
    def arch(self, value: object | None) -> None: ...

    @property
    def extra_options(self) -> list[str]:
        """A copy of the list: assign a new list to change it."""

    @extra_options.setter
    def extra_options(self, value: object | None) -> None: ...

class HeuristicParams:
    """
    What a scheduler decided for one kernel: launch (lparams) and compile (cparams) parameters plus the subclass's fields. scheduler_type is fixed at construction.
    """

    def __init__(self, scheduler_type: kfuse.schedule.types.SchedulerType | str = 'none') -> None: ...

    @property
    def scheduler_type(self) -> kfuse.schedule.types.SchedulerType:
        """The scheduler these params are for, a kfuse.SchedulerType (read-only)."""

    def to_dict(self) -> dict:
        """
        {'scheduler_type': ..., <fields>..., 'lparams': {...}, 'cparams': {...}}
        """

    @staticmethod
    def from_dict(d: dict) -> HeuristicParams:
        """Rebuild params from to_dict() output, as the right subclass."""

    def copy(self) -> HeuristicParams: ...

    def __copy__(self) -> HeuristicParams: ...

    def __deepcopy__(self, memo: object) -> HeuristicParams: ...

    def __eq__(self, arg: HeuristicParams, /) -> bool: ...

    def __ne__(self, arg: HeuristicParams, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __repr__(self) -> str: ...

    @property
    def lparams(self) -> LaunchParams: ...

    @lparams.setter
    def lparams(self, value: object | None) -> None: ...

    @property
    def cparams(self) -> CompileParams: ...

    @cparams.setter
    def cparams(self, value: object | None) -> None: ...

class PointwiseParams(HeuristicParams):
    """
    Pointwise schedule: vectorization and unroll factors, break_point (-1: 1-D schedule; else the axes before it map to y), block and grid shape, split_grid_y. Keyword arguments set fields: PointwiseParams(vectorization_factor=4).
    """

    def __init__(self, scheduler_type: kfuse.schedule.types.SchedulerType | str = 'pointwise', **kwargs) -> None: ...

    @property
    def vectorization_factor(self) -> int: ...

    @vectorization_factor.setter
    def vectorization_factor(self, value: object | None) -> None: ...

    @property
    def unroll_factor(self) -> int: ...

    @unroll_factor.setter
    def unroll_factor(self, value: object | None) -> None: ...

    @property
    def unroll_factor_outer(self) -> int: ...

    @unroll_factor_outer.setter
    def unroll_factor_outer(self, value: object | None) -> None: ...

    @property
    def break_point(self) -> int: ...

    @break_point.setter
    def break_point(self, value: object | None) -> None: ...

    @property
    def block_x(self) -> int: ...

    @block_x.setter
    def block_x(self, value: object | None) -> None: ...

    @property
    def block_y(self) -> int: ...

    @block_y.setter
    def block_y(self, value: object | None) -> None: ...

    @property
    def grid_x(self) -> int: ...

    @grid_x.setter
    def grid_x(self, value: object | None) -> None: ...

    @property
    def grid_y(self) -> int: ...

    @grid_y.setter
    def grid_y(self, value: object | None) -> None: ...

    @property
    def split_grid_y(self) -> bool: ...

    @split_grid_y.setter
    def split_grid_y(self, value: object | None) -> None: ...

class ReductionParams(HeuristicParams):
    """
    Reduction/normalization schedule: reduction layout (fastest_dim_reduction), persistence, block/grid shape, vectorize/unroll factors for the iteration and reduction domains, and cross-block / cross-grid flags. Keyword arguments set fields.
    """

    def __init__(self, scheduler_type: kfuse.schedule.types.SchedulerType | str = 'reduction', **kwargs) -> None: ...

    @property
    def fastest_dim_reduction(self) -> bool: ...

    @fastest_dim_reduction.setter
    def fastest_dim_reduction(self, value: object | None) -> None: ...

    @property
    def persistent(self) -> bool: ...

    @persistent.setter
    def persistent(self, value: object | None) -> None: ...

    @property
    def persistent_batch_size(self) -> int: ...

    @persistent_batch_size.setter
    def persistent_batch_size(self, value: object | None) -> None: ...

    @property
    def smem_persistent(self) -> bool: ...

    @smem_persistent.setter
    def smem_persistent(self, value: object | None) -> None: ...

    @property
    def reload_batch_size(self) -> int: ...

    @reload_batch_size.setter
    def reload_batch_size(self, value: object | None) -> None: ...

    @property
    def cluster_size(self) -> int: ...

    @cluster_size.setter
    def cluster_size(self, value: object | None) -> None: ...

    @property
    def block_x(self) -> int: ...

    @block_x.setter
    def block_x(self, value: object | None) -> None: ...

    @property
    def block_y(self) -> int: ...

    @block_y.setter
    def block_y(self, value: object | None) -> None: ...

    @property
    def grid_x(self) -> int: ...

    @grid_x.setter
    def grid_x(self, value: object | None) -> None: ...

    @property
    def grid_y(self) -> int: ...

    @grid_y.setter
    def grid_y(self, value: object | None) -> None: ...

    @property
    def vectorize_iter(self) -> int: ...

    @vectorize_iter.setter
    def vectorize_iter(self, value: object | None) -> None: ...

    @property
    def vectorize_reduction(self) -> int: ...

    @vectorize_reduction.setter
    def vectorize_reduction(self, value: object | None) -> None: ...

    @property
    def unroll_iter(self) -> int: ...

    @unroll_iter.setter
    def unroll_iter(self, value: object | None) -> None: ...

    @property
    def unroll_reduction(self) -> int: ...

    @unroll_reduction.setter
    def unroll_reduction(self, value: object | None) -> None: ...

    @property
    def reduction_unroll(self) -> bool: ...

    @reduction_unroll.setter
    def reduction_unroll(self, value: object | None) -> None: ...

    @property
    def cross_block_inner_reduction(self) -> bool: ...

    @cross_block_inner_reduction.setter
    def cross_block_inner_reduction(self, value: object | None) -> None: ...

    @property
    def cross_block_outer_reduction(self) -> bool: ...

    @cross_block_outer_reduction.setter
    def cross_block_outer_reduction(self, value: object | None) -> None: ...

    @property
    def cross_block(self) -> bool: ...

    @cross_block.setter
    def cross_block(self, value: object | None) -> None: ...

    @property
    def cross_grid_count(self) -> int: ...

    @cross_grid_count.setter
    def cross_grid_count(self, value: object | None) -> None: ...

    @property
    def split_grid_dim_iter(self) -> bool: ...

    @split_grid_dim_iter.setter
    def split_grid_dim_iter(self, value: object | None) -> None: ...

def driver_version() -> int:
    """
    The CUDA version the driver supports, e.g. 13000. Raises CudaError without a driver.
    """

def device_count() -> int:
    """
    Number of visible CUDA devices (0 when the driver sees none). Raises CudaError when the driver is missing or unusable.
    """

def current_device() -> int:
    """
    Device of the CUDA context current on this thread, or 0 when there is none.
    """

def get_device_properties(index: int) -> DeviceProperties:
    """Properties of device `index` (queried once, cached)."""

def synchronize(device: int | None = None) -> None:
    """Wait for all work on the device (None: the current one)."""

def driver_library() -> str:
    """Path or soname of the loaded libcuda, or '' when not loaded yet."""

class DeviceProperties:
    """What kfuse needs to know about one CUDA device."""

    @property
    def index(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def major(self) -> int: ...

    @property
    def minor(self) -> int: ...

    @property
    def sm_count(self) -> int: ...

    @property
    def max_threads_per_block(self) -> int: ...

    @property
    def max_threads_per_sm(self) -> int: ...

    @property
    def max_blocks_per_sm(self) -> int: ...

    @property
    def warp_size(self) -> int: ...

    @property
    def max_block_dim(self) -> tuple: ...

    @property
    def max_grid_dim(self) -> tuple: ...

    @property
    def shared_mem_per_block(self) -> int: ...

    @property
    def shared_mem_per_block_optin(self) -> int: ...

    @property
    def shared_mem_per_sm(self) -> int: ...

    @property
    def regs_per_block(self) -> int: ...

    @property
    def regs_per_sm(self) -> int: ...

    @property
    def l2_cache_bytes(self) -> int: ...

    @property
    def total_memory(self) -> int: ...

    @property
    def clock_khz(self) -> int: ...

    @property
    def memory_clock_khz(self) -> int: ...

    @property
    def memory_bus_width(self) -> int: ...

    @property
    def peak_bandwidth_gbs(self) -> float:
        """
        2 * memory clock * bus width / 8, in GB/s (0 if the driver hides them).
        """

    def __repr__(self) -> str: ...

def set_nvrtc_library(path: str) -> None:
    """
    Use this libnvrtc (before the first compile; kfuse.runtime.nvrtc_loader finds it by default).
    """

def nvrtc_library() -> str:
    """Path of the loaded libnvrtc, or '' when not loaded yet."""

def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the loaded NVRTC."""

def nvrtc_supported_archs() -> list[int]:
    """Compute capabilities NVRTC can target, e.g. [75, 80, 86, 89, 90, ...]."""

def compile_to_cubin(source: str, name: str = 'kernel.cu', arch: str | None = None, options: Sequence[str] | None = None, headers: Sequence[tuple[str, str]] | None = None) -> bytes:
    """
    Compile CUDA C++ to a cubin for `arch` ('sm_80'; None: the current device); `headers`: (name, text) pairs the source may #include. Raises CompileError with NVRTC's log and the numbered source.
    """

def compile_to_ptx(source: str, name: str = 'kernel.cu', arch: str | None = None, options: Sequence[str] | None = None, headers: Sequence[tuple[str, str]] | None = None) -> str:
    """
    The PTX NVRTC makes of CUDA C++ for `arch` ('sm_90' or 'compute_90'; None: the current device), with the same options a cubin would be compiled with. Raises CompileError like compile_to_cubin.
    """

class Kernel:
    """A cubin's kernel on one device; the module loads on first use."""

    def __init__(self, cubin: bytes, kernel_name: str, device: int = 0) -> None: ...

    @property
    def name(self) -> str: ...

    @property
    def device(self) -> int: ...

    @property
    def num_regs(self) -> int: ...

    @property
    def static_shared_mem(self) -> int: ...

    @property
    def local_mem(self) -> int: ...

    @property
    def max_threads_per_block(self) -> int: ...

    @property
    def param_sizes(self) -> list[int]:
        """Byte size of each parameter (cuFuncGetParamInfo)."""

    def launch(self, grid: Sequence[int], block: Sequence[int], shared_mem: int, stream: int, args: object) -> None:
        """
        Launch with args packed by parameter size (docs/INTERFACES.md, Kernel ABI).
        """

class KernelExecutor:
    """
    Compiles one raw CUDA kernel and runs it. Launch constraints given to compile() are defaults that those given to run() override field by field.
    """

    def __init__(self) -> None: ...

    def compile(self, source: str, kernel_name: str, launch_constraints: LaunchParams | None = None, compile_params: CompileParams | None = None) -> None: ...

    def run(self, args: object, launch_constraints: LaunchParams | None = None, stream: int | None = None) -> None:
        """Launch on `stream` (None here: the legacy default stream 0)."""

    @staticmethod
    def default_options() -> list[str]:
        """NVRTC options kfuse always passes before CompileParams' own."""

    @property
    def is_compiled(self) -> bool: ...

    @property
    def kernel_name(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def arch(self) -> str: ...

    @property
    def cubin(self) -> bytes: ...

    @property
    def launch_constraints(self) -> LaunchParams: ...

    @property
    def compile_params(self) -> CompileParams: ...

    def kernel(self, device: int) -> Kernel:
        """The Kernel loaded on `device`."""

class PackedLaunch:
    """
    A launch packed once; each call patches its arrays' data pointers in (the host fast path).
    """

    def __init__(self, kernel: Kernel, grid: Sequence[int], block: Sequence[int], shared_mem: int, args: object, slots: Sequence[tuple[int, str, int, int]]) -> None:
        """
        slots: (parameter, 'input' | 'output' | 'workspace', index, byte offset) for each tensor parameter whose data pointer changes per call, and (parameter, 'scalar', input position, 0) for each scalar input's parameter.
        """

    def launch(self, stream: int, inputs: Sequence[int], outputs: Sequence[int], workspaces: Sequence[int], scalars: Sequence[object] = []) -> None:
        """scalars: the values of the launch's scalar slots, by slot index."""

class FastCall:
    """One input layout's cached call (kfuse.runtime.fast_path)."""

    def __init__(self, framework: str, device: int, inputs: Sequence[tuple], outputs: Sequence[tuple], workspaces: Sequence[tuple], launches: Sequence[object], stream_callable: object, stream_args: object, device_callable: object | None, tag: object | None, scalars: object | None = None, given: object | None = None, direct_scalars: object | None = None) -> None:
        """
        scalars: callable(inputs) returning the values of the launches' scalar slots (required when they have any). given: (a layout spec for each output as the inputs' are given, each output's size in bytes, (bytes below, bytes above) each input's data pointer) to take the caller's outputs in call_into. direct_scalars: (input position, 0 | 1) per scalar slot where each slot's value is that scalar input's as given (0) or rounded to float32 (1), read without calling `scalars` (which still decides a float32 slot's value beyond float32's finite range).
        """

    def __call__(self, inputs: object, stream: object | None = None) -> object:
        """
        (tag, outputs) after launching, or None when the inputs have another layout.
        """

    def call_into(self, inputs: object, outputs: object, stream: object | None = None) -> object:
        """
        (tag, outputs) after launching into `outputs` (a list of arrays, returned as a new list of the same objects), or None when the inputs have another layout or an output does not fit exactly.
        """

    def stage_times(self, inputs: object, outputs: object | None = None, repeats: int = 1000, between: object | None = None) -> dict:
        """
        Where a call's host time goes: {stage: median ns} for 'match inputs', 'match outputs' (outputs given), 'stream', 'allocate outputs' (none given, freeing included), 'allocate workspaces', 'launches' (a list, each launch's) and the whole 'call', each stage run `repeats` times on its own; `between` (e.g. torch.cuda.synchronize) is called before each launching repetition, untimed.
        """

    @property
    def tag(self) -> object: ...

class FastCallCache:
    """A fusion's FastCalls, newest first."""

    def __init__(self) -> None: ...

    MAX_ENTRIES: Final[int] = ...
    """FastCalls kept; adding one more drops the oldest."""

    def add(self, entry: object) -> None: ...

    def __call__(self, inputs: object, stream: object | None = None) -> object: ...

    def call_into(self, inputs: object, outputs: object, stream: object | None = None) -> object: ...

    def __len__(self) -> int: ...

    def entries(self) -> list:
        """The FastCalls, newest first."""

    def clear(self) -> None: ...

class ReplayRun:
    """
    Consecutive kernel segments of a replayed segmented call, run by one call (kfuse.engine.replay_runs).
    """

    def __init__(self, framework: str, pointer_of: object | None, table_size: int, inputs: Sequence[int], checked: Sequence[tuple], exports: Sequence[tuple], pool: object | None, launches: Sequence[object], scalar_count: int, poison: object | None = None) -> None:
        """
        framework: 'torch', 'cupy' or 'numpy'; pointer_of: callable(array) -> data pointer, for NumPy arrays; table_size: the pointer table's length (the replay's slots, then pooled buffers); inputs: the table entries read from the call's pointers; checked: (slot, (type, dtype, shape, strides, alignment class, device)) per array from a library segment the run reads, matched per call (torch and CuPy; [] for NumPy); exports: (slot, callable, args, kwargs, alignment class or -1, like slot or -1: callable(slots[like]) instead) per array the run makes for later readers; pool: None or (callable, args, kwargs, [(table entry, byte offset)]) for the buffers only its kernels read; launches: a PackedLaunch (whose 'input' slots index the table) each, or for the emulator (kernel, grid, block, shared_mem, args, [(parameter, table entry, byte offset)], [(parameter, scalar index)]); scalar_count: the scalar values a call passes; poison: callable(array) called on each exported array and the pool, or None.
        """

    def __call__(self, slots: object, pointers: object, scalars: object | None, stream: int) -> bool:
        """
        Allocate, launch, and write the exported arrays and their data pointers into `slots` and `pointers`: True, or False before anything is launched when a scalar does not fit its parameter, a checked array is off its layout, or an exported array read by a later kernel of the run is at another alignment class than planned.
        """

class ProfilerError(kfuse._errors_base.KfuseError):
    """
    The profiler (CUPTI) could not be used: no GPU, no CUPTI, another profiler holds it, or CUPTI reported an error.
    """

class KernelActivity:
    """One CUPTI kernel record, decoded (internal; tests build these)."""

    def __init__(self) -> None: ...

    @property
    def name(self) -> str: ...

    @name.setter
    def name(self, arg: str, /) -> None: ...

    @property
    def correlation_id(self) -> int: ...

    @correlation_id.setter
    def correlation_id(self, arg: int, /) -> None: ...

    @property
    def device(self) -> int: ...

    @device.setter
    def device(self, arg: int, /) -> None: ...

    @property
    def context(self) -> int: ...

    @context.setter
    def context(self, arg: int, /) -> None: ...

    @property
    def stream(self) -> int: ...

    @stream.setter
    def stream(self, arg: int, /) -> None: ...

    @property
    def start_ns(self) -> int: ...

    @start_ns.setter
    def start_ns(self, arg: int, /) -> None: ...

    @property
    def end_ns(self) -> int: ...

    @end_ns.setter
    def end_ns(self, arg: int, /) -> None: ...

    @property
    def grid(self) -> tuple: ...

    @grid.setter
    def grid(self, arg: Sequence[int], /) -> None: ...

    @property
    def block(self) -> tuple: ...

    @block.setter
    def block(self, arg: Sequence[int], /) -> None: ...

    @property
    def cluster(self) -> tuple: ...

    @cluster.setter
    def cluster(self, arg: Sequence[int], /) -> None: ...

    @property
    def dynamic_shared_mem(self) -> int: ...

    @dynamic_shared_mem.setter
    def dynamic_shared_mem(self, arg: int, /) -> None: ...

    @property
    def static_shared_mem(self) -> int: ...

    @static_shared_mem.setter
    def static_shared_mem(self, arg: int, /) -> None: ...

    @property
    def registers(self) -> int: ...

    @registers.setter
    def registers(self, arg: int, /) -> None: ...

class ExternalCorrelation:
    """One CUPTI external-correlation record (internal)."""

    def __init__(self) -> None: ...

    @property
    def external_kind(self) -> int: ...

    @external_kind.setter
    def external_kind(self, arg: int, /) -> None: ...

    @property
    def external_id(self) -> int: ...

    @external_id.setter
    def external_id(self, arg: int, /) -> None: ...

    @property
    def correlation_id(self) -> int: ...

    @correlation_id.setter
    def correlation_id(self, arg: int, /) -> None: ...

class Activities:
    """The records of one profiling session."""

    def __init__(self) -> None: ...

    @property
    def kernels(self) -> list[KernelActivity]: ...

    @kernels.setter
    def kernels(self, arg: Sequence[KernelActivity], /) -> None: ...

    @property
    def correlations(self) -> list[ExternalCorrelation]: ...

    @correlations.setter
    def correlations(self, arg: Sequence[ExternalCorrelation], /) -> None: ...

class FusionRecord:
    """One execute seen by a profiler (internal)."""

    def __init__(self) -> None: ...

    @property
    def fusion_id(self) -> int: ...

    @fusion_id.setter
    def fusion_id(self, arg: int, /) -> None: ...

    @property
    def device(self) -> int: ...

    @device.setter
    def device(self, arg: int, /) -> None: ...

    @property
    def host_time_ms(self) -> float: ...

    @host_time_ms.setter
    def host_time_ms(self, arg: float, /) -> None: ...

    @property
    def compile_time_ms(self) -> float: ...

    @compile_time_ms.setter
    def compile_time_ms(self, arg: float, /) -> None: ...

class SegmentTag:
    """
    The launches of one segment and the external id tagging them (internal).
    """

    def __init__(self) -> None: ...

    @property
    def external_id(self) -> int: ...

    @external_id.setter
    def external_id(self, arg: int, /) -> None: ...

    @property
    def fusion_id(self) -> int: ...

    @fusion_id.setter
    def fusion_id(self, arg: int, /) -> None: ...

    @property
    def segment_id(self) -> int: ...

    @segment_id.setter
    def segment_id(self, arg: int, /) -> None: ...

    @property
    def scheduler(self) -> str: ...

    @scheduler.setter
    def scheduler(self, arg: str, /) -> None: ...

    @property
    def device(self) -> int: ...

    @device.setter
    def device(self, arg: int, /) -> None: ...

    @property
    def input_bytes(self) -> int: ...

    @input_bytes.setter
    def input_bytes(self, arg: int, /) -> None: ...

    @property
    def output_bytes(self) -> int: ...

    @output_bytes.setter
    def output_bytes(self, arg: int, /) -> None: ...

    @property
    def compile_time_ms(self) -> float: ...

    @compile_time_ms.setter
    def compile_time_ms(self, arg: float, /) -> None: ...

    @property
    def kernel_compile_ms(self) -> list[tuple[str, float]]: ...

    @kernel_compile_ms.setter
    def kernel_compile_ms(self, arg: Sequence[tuple[str, float]], /) -> None: ...

class KernelProfile:
    """
    One kernel a fusion ran, as CUPTI measured it. A segment's input bytes are charged to its first kernel and its output bytes to its last.
    """

    @property
    def name(self) -> str:
        """The kernel's (demangled) name."""

    @property
    def scheduler(self) -> str:
        """
        The scheduler of its segment ('pointwise', 'reduction', 'expr_eval', 'user').
        """

    @property
    def segment_id(self) -> int: ...

    @property
    def device(self) -> int: ...

    @property
    def stream(self) -> int:
        """CUPTI's id of the stream."""

    @property
    def correlation_id(self) -> int: ...

    @property
    def time_ms(self) -> float:
        """GPU time, end - start."""

    @property
    def compile_time_ms(self) -> float:
        """Time spent compiling this kernel in this execute (0 when cached)."""

    @property
    def grid(self) -> tuple: ...

    @property
    def block(self) -> tuple: ...

    @property
    def cluster(self) -> tuple: ...

    @property
    def dynamic_shared_mem(self) -> int: ...

    @property
    def static_shared_mem(self) -> int: ...

    @property
    def registers(self) -> int:
        """Registers per thread."""

    @property
    def input_bytes(self) -> int: ...

    @property
    def output_bytes(self) -> int: ...

    @property
    def effective_bandwidth_gbs(self) -> float: ...

    @property
    def percentage_peak_bandwidth(self) -> float: ...

    def to_dict(self) -> dict:
        """The fields as a dict (tuples for dimensions)."""

    def __repr__(self) -> str: ...

class FusionProfile:
    """
    What one execute ran: its kernels, their total GPU time, the host and compile time, and the bandwidth achieved.
    """

    @property
    def fusion_id(self) -> int:
        """Position in PythonProfiler.profiles."""

    @property
    def device(self) -> int: ...

    @property
    def segments(self) -> int:
        """Number of segments (1 if unsegmented)."""

    @property
    def kernel_time_ms(self) -> float:
        """Sum of the kernels' times."""

    @property
    def host_time_ms(self) -> float:
        """Wall time of the execute call."""

    @property
    def compile_time_ms(self) -> float:
        """Time this execute spent scheduling and compiling (0 when cached)."""

    @property
    def input_bytes(self) -> int: ...

    @property
    def output_bytes(self) -> int: ...

    @property
    def effective_bandwidth_gbs(self) -> float:
        """Bytes of every segment's inputs and outputs / kernel_time_ms."""

    @property
    def percentage_peak_bandwidth(self) -> float: ...

    @property
    def kernel_profiles(self) -> list[KernelProfile]: ...

    def to_dict(self) -> dict:
        """The fields as a dict; kernel_profiles as dicts."""

    def __repr__(self) -> str: ...

def set_cupti_library(path: str) -> None:
    """
    Use this libcupti (before the profiler first starts; kfuse.profiler finds it).
    """

def cupti_library() -> str:
    """Path of the loaded libcupti, or '' when not loaded yet."""

def profiler_start() -> None:
    """
    Take CUPTI and record kernels. Raises ProfilerError (no GPU, no CUPTI, another profiler holds CUPTI).
    """

def profiler_stop(devices: Sequence[int]) -> Activities:
    """Wait for `devices`, flush, release CUPTI; the records since start."""

def profiler_recording() -> bool: ...

def profiler_push_external_id(id: int) -> None:
    """Tag this thread's next launches with `id`."""

def profiler_pop_external_id() -> None: ...

def join_profiles(fusions: Sequence[FusionRecord], segments: Sequence[SegmentTag], activities: Activities, peak_bandwidth_gbs: Mapping[int, float], external_kind: int = 5) -> list[FusionProfile]:
    """
    FusionProfiles from kfuse's records and CUPTI's (pure; records in any order).
    """

def demangle(name: str) -> str: ...

PROFILER_EXTERNAL_KIND: int = 5
