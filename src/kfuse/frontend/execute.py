"""The run-time half of FusionDefinition: execute, manual_execute, last_cuda_source.

Kept apart from the frontend (which only builds the IR) so that defining a fusion never
imports the schedulers, the code generator or the backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kfuse.frontend.nvfuser_options import check_execute_options
from kfuse.runtime import index_checks, profiling_hooks
from kfuse.runtime.arrays import framework_of
from kfuse.runtime.device_arg import device_index

if TYPE_CHECKING:
    from kfuse.engine.program import Program
    from kfuse.schedule.types import SchedulerType


class FusionExecution:
    """Mixed into FusionDefinition; expects `self.fusion`."""

    if TYPE_CHECKING:

        @property
        def fusion(self) -> Any: ...

    _vector_inputs = False
    _executor_cache: Any = None
    _broken_by = ""  # what the `with` block raised, for a definition it left incomplete

    @property
    def fec(self) -> Any:
        """The definition's executor cache (nvFuser's name: FusionExecutorCache), made by its
        first execute or given from an LRUCache; no attribute before either, as in nvFuser
        (LruFusionCache tests `hasattr(fd, "fec")`)."""
        if self._executor_cache is None:
            raise AttributeError("fec: the definition has not run, and was given no cache")
        return self._executor_cache

    @fec.setter
    def fec(self, executor: Any) -> None:
        # nvFuser's way to share one cache among equal definitions:
        #     fd.fec = lru_cache.cache_compile(fd.fusion)
        # A cache made for a different definition would run something else in fd's name,
        # so that is refused where fd still holds its own fusion to compare.
        from kfuse.engine.executor import FusionExecutorCache
        from kfuse.errors import DefinitionError

        if getattr(self, "_state", "closed") != "closed":
            raise DefinitionError(
                "fd.fec: finish the definition (leave its `with` block) before giving it a cache"
            )
        if not isinstance(executor, FusionExecutorCache):
            raise DefinitionError(
                f"fd.fec must be a FusionExecutorCache (from LRUCache.cache_compile), "
                f"got {type(executor).__name__}"
            )
        own = self.__dict__.get("_fusion")
        if own is not None and own is not executor.definition and own != executor.definition:
            raise DefinitionError(
                "fd.fec: the cache was made for a different definition (its fusion is "
                "not equal to fd.fusion)"
            )
        self._executor_cache = executor

    def _executor(self) -> Any:
        if self._executor_cache is None:
            from kfuse.engine.executor import FusionExecutorCache
            from kfuse.errors import DefinitionError

            state = getattr(self, "_state", "closed")
            if state == "broken":
                raise DefinitionError(
                    f"execute: the FusionDefinition's `with` block raised "
                    f"({self._broken_by}), so the fusion is incomplete; "
                    "define it again"
                )
            if not self.fusion.outputs or state != "closed":
                raise DefinitionError(
                    "execute: finish the definition (leave its `with` block) before running it"
                )
            self._executor_cache = FusionExecutorCache(self.fusion)
        return self._executor_cache

    def execute(
        self,
        inputs: Any,
        *,
        outputs: Any = None,
        stream: int | None = None,
        device: Any = None,
        save_repro_inputs: bool | None = False,
        _enable_options: Sequence[str] | None = None,
        _disable_options: Sequence[str] | None = None,
    ) -> list[Any]:
        """Run the fusion: pick a scheduler, compile (cached), launch, return the outputs.

        inputs: arrays (CuPy or torch on a GPU; NumPy or CPU torch run on the host emulator)
        and Python numbers for scalar inputs, in definition order (a define_vector's as one
        list or tuple). Outputs are new arrays of the inputs' framework on their device,
        produced on the framework's current stream unless `stream` (an integer CUDA stream
        handle) is given; a reshape of another output is a view of its array (output_views).

        outputs: arrays to write the outputs into instead (one per returned output, in
        order), returned as the result (the same objects): each of the inputs' framework and
        device, the output's dtype and shape, dense in the layout the kernel writes (row major,
        or the fd.ops.stride_order asked for), 16-byte aligned, sharing no memory with an
        input or another output; anything else is an InputError, and nothing is written.
        A cached layout's call takes the C++ fast path with them where each fits exactly.

        device: as nvFuser takes it, a CUDA device index, "cuda:N" or a torch.device. With
        tensor inputs it must name their device; without (outputs made by factories and
        random ops alone) the fusion runs there and returns torch tensors (CuPy arrays where
        torch is not installed); left unset, such a fusion runs on the host emulator.

        save_repro_inputs, _enable_options and _disable_options are nvFuser's (Thunder passes
        them): accepted as nvFuser's types (save_repro_inputs None is False: Thunder passes its
        unset compile option as None); save_repro_inputs hands the inputs to
        `_keep_repro_inputs` (kfuse.nvfuser_direct's definition keeps their descriptions for
        its repro script); an option list names nvFuser's NVFUSER_ENABLE/DISABLE options,
        which steer nvFuser's own compiler: kfuse accepts each name nvFuser knows and changes
        nothing for it, and refuses any other (kfuse.frontend.nvfuser_options).
        """
        if not (save_repro_inputs is False and _enable_options is _disable_options is None):
            check_execute_options(save_repro_inputs, _enable_options, _disable_options)
            if save_repro_inputs is True:
                self._keep_repro_inputs(inputs)
        if self._vector_inputs:
            inputs = _unpacked_vectors(inputs)
        if stream is not None:
            # As if called inside the framework's context for that stream: what the call
            # allocates (outputs, scratch, segments' intermediates) is then ordered with the
            # launches there, and the framework frees nothing that a launch still uses.
            with _callers_stream(inputs, stream, device):
                return self.execute(inputs, outputs=outputs, device=device)
        if device is not None and _names_inputs_device(device, inputs):
            device = None  # Thunder passes device= on every call: it must not cost the fast path
        executor = self._executor_cache
        # The host fast path first, with no Python frame of kfuse's in between: a cached
        # layout launches from C++ (kfuse.engine.fast_path); anything else takes the checked path,
        # which is told not to try the fast path again. Before and after it, a position outside
        # its axis that an earlier launch read is reported (kfuse.runtime.index_checks).
        if (
            executor is not None
            and device is None
            and executor.fast_calls is not None
            and profiling_hooks.active is None
        ):
            index_checks.raise_pending()
            try:
                if outputs is None:
                    hit = executor.fast_calls(inputs, stream)
                elif executor.views is None:  # where each given output fits exactly
                    hit = executor.fast_calls.call_into(inputs, outputs, stream)
                else:  # the whole fusion writes every given array (engine.output_views)
                    hit = None
            except (MemoryError, RuntimeError) as exc:
                _raise_out_of_memory(exc)
            if hit is not None:
                executor.last_compiled, outputs = hit
                index_checks.raise_pending()
                return executor.shown(outputs)
        # build_runtime_info checks that the inputs are a list (kfuse.runtime.info.input_list).
        return self._executor().execute(inputs, device=device, try_fast=False, outputs=outputs)

    def _keep_repro_inputs(self, inputs: Any) -> None:
        """What execute(save_repro_inputs=True) does with the inputs: nothing here."""

    def manual_execute(
        self,
        inputs: Any,
        heuristic_params: Any,
        *,
        stream: int | None = None,
        device: Any = None,
    ) -> list[Any]:
        """Run with exactly `heuristic_params` (e.g. from schedule.compute_heuristics, then
        edited); never re-scheduled. Raises SchedulerError when its scheduler rejects the
        fusion for these inputs."""
        from kfuse.errors import SchedulerError

        if not hasattr(heuristic_params, "scheduler_type"):
            raise SchedulerError(
                f"manual_execute: heuristic_params must be a HeuristicParams, "
                f"got {type(heuristic_params).__name__}"
            )
        with _callers_stream(inputs, stream, device):
            return self._executor().execute(inputs, device=device, params=heuristic_params)

    def segments(self, inputs: Any, *, device: Any = None) -> list[Any]:
        """How execute would run the fusion on `inputs`: a list of Segment descriptions
        (scheduler, inputs and outputs by name, exprs, and why the fusion was split), in
        execution order; one Segment when a single scheduler takes the whole fusion.
        Nothing is compiled; a segmentation is cached for the inputs' signature."""
        return self._executor().segments(inputs, device=device)

    def last_cuda_source(self) -> str | None:
        """The generated CUDA source of the kernel(s) the last execute ran."""
        if self._executor_cache is None:
            return None
        return self._executor_cache.last_cuda_source()

    def last_program(self) -> Program | None:
        """What the last execute ran (None before the first): a kfuse.engine.program.Program, whose
        str() shows each stage's result (scheduler and params, each kernel's spec and launch;
        `.cuda_source()` the sources; `.segments()` a segmented fusion's segments)."""
        if self._executor_cache is None:
            return None
        return self._executor_cache.last_compiled

    def last_scheduler(self) -> SchedulerType | None:
        """The SchedulerType the last execute used (None before the first)."""
        if self._executor_cache is None or self._executor_cache.last_compiled is None:
            return None
        return self._executor_cache.last_compiled.scheduler


def _unpacked_vectors(inputs: Any) -> Any:
    """A define_vector's list or tuple of ints as that many scalar inputs, as nvFuser takes
    them (any other list or tuple entry too, which only a vector's place may hold)."""
    if not isinstance(inputs, (list, tuple)):
        return inputs
    flat: list[Any] = []
    for a in inputs:
        if isinstance(a, (list, tuple)):
            flat.extend(a)
        else:
            flat.append(a)
    return flat


def _raise_out_of_memory(exc: BaseException) -> None:
    """A cached call's allocation failure as kfuse's OutOfMemoryError (else `exc` again)."""
    from kfuse.errors import OutOfMemoryError
    from kfuse.runtime.arrays import is_out_of_memory

    if not is_out_of_memory(exc):
        raise exc
    raise OutOfMemoryError(
        f"cannot allocate the outputs of a cached call: "
        f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    ) from None


def _names_inputs_device(device: Any, inputs: Any) -> bool:
    """Whether `device` (execute's device=) is the CUDA device of the first array of
    `inputs`: the call then runs as it would without device= (a mismatch, host arrays or no
    arrays keep device= for the checked path to act on)."""
    for a in inputs if isinstance(inputs, (list, tuple)) else ():
        framework = framework_of(a)
        if framework == "torch":
            return a.device.type == "cuda" and (a.device.index or 0) == device_index(device)
        if framework is not None:
            return framework == "cupy" and int(a.device.id) == device_index(device)
    return False


def _callers_stream(inputs: Any, stream: int | None, device: Any = None) -> Any:
    """kfuse.runtime.arrays.stream_context for `stream` and the framework and device of the
    first GPU array of `inputs`, or of `device` for a call without arrays (a null context
    without a stream, or without either)."""
    import contextlib

    from kfuse.errors import InputError
    from kfuse.runtime.arrays import layout_of, stream_context
    from kfuse.runtime.device_arg import check_device_exists, generated_framework

    if stream is None:
        return contextlib.nullcontext()
    if type(stream) is not int or stream < 0:
        raise InputError(
            f"stream must be a CUDA stream handle (an int >= 0, such as "
            f"torch.cuda.Stream().cuda_stream or cupy's Stream.ptr), got "
            f"{stream!r}"
        )
    if not isinstance(inputs, (list, tuple)):
        return contextlib.nullcontext()  # the call itself says what is wrong with them
    arrays = [a for a in inputs if framework_of(a)]
    for a in arrays:
        framework = framework_of(a)
        if framework in ("torch", "cupy"):
            lay = layout_of(a, "input")
            if lay.device >= 0:
                return stream_context(framework, lay.device, stream)
    index = device_index(device)
    if not arrays and index is not None:
        check_device_exists(index)
        return stream_context(generated_framework(), index, stream)
    return contextlib.nullcontext()
