"""nvFuser's execute options (`_enable_options`, `_disable_options`: the names of its
NVFUSER_ENABLE and NVFUSER_DISABLE settings, csrc/options.cpp), as kfuse takes them.

Each steers how nvFuser's own compiler lowers, schedules or instruments a fusion (index
hoisting, the id model, kernel reuse across shapes, parallel compiles, fma contraction, NVTX
ranges, its kernel database): none changes what a fusion computes beyond rounding, and kfuse
has none of those stages, so a known name is accepted and changes nothing (kfuse's own
settings are kfuse.knobs and kfuse.switches). A name nvFuser does not know is an error, as it
is in nvFuser: a misspelt option is never silently dropped. nvFuser's own tests pass them
(test_cuda_graph.py: `_disable_options=["kernel_reuse"]`), as Thunder does where its
`nv_enable_options` / `nv_disable_options` compile options are set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ENABLE_OPTIONS = frozenset(
    {
        "fuse_matmul",
        "fuse_multiple_matmuls",
        "host_ir_lowering",
        "id_model",
        "id_model_extra_validation",
        "io_to_lower_precision",
        "kernel_db",
        "kernel_debug",
        "kernel_lineinfo",
        "kernel_profile",
        "memory_promotion",
        "reuse_zeroed_memory",
        "static_fusion_count",
        "wait_debugger",
        "warn_register_spill",
        "ws_normalization",
    }
)
"""nvFuser's NVFUSER_ENABLE names (csrc/options.cpp, getEnableOptions)."""

DISABLE_OPTIONS = frozenset(
    {
        "compile_to_sass",
        "contig_indexing",
        "expr_simplify",
        "fallback",
        "fma",
        "grouped_grid_welford_outer_opt",
        "id_model",
        "index_hoist",
        "kernel_reuse",
        "magic_zero",
        "matmul_expr_eval",
        "multidevice",
        "nvtx",
        "parallel_compile",
        "parallel_serde",
        "predicate_elimination",
        "python_inline_definitions",
        "resize_scheduler",
        "reuse_mismatched_type_registers",
        "var_name_remapping",
        "welford_vectorization",
    }
)
"""nvFuser's NVFUSER_DISABLE names (csrc/options.cpp, getDisableOptions)."""


def check_execute_options(save_repro_inputs: Any, enable: Any, disable: Any) -> None:
    """InputError unless save_repro_inputs is a bool (or None) and each options list is a
    list of nvFuser's option names. execute calls it unless the keywords are its defaults,
    tested by identity (an array passed by mistake has no truth value, and a false mistake,
    0 or "", must still be checked); Thunder's unset values (None, False, []) pass first."""
    from kfuse.errors import InputError

    if save_repro_inputs is not None and not isinstance(save_repro_inputs, bool):
        raise InputError(f"execute: save_repro_inputs must be a bool, got {save_repro_inputs!r}")
    for name, options, known in (
        ("_enable_options", enable, ENABLE_OPTIONS),
        ("_disable_options", disable, DISABLE_OPTIONS),
    ):
        if options is None or (type(options) is list and not options):
            continue
        if not isinstance(options, Sequence) or isinstance(options, str):
            raise InputError(f"execute: {name} must be a list of strings, got {options!r}")
        if not all(isinstance(o, str) for o in options):
            raise InputError(f"execute: {name} must be a list of strings, got {options!r}")
        unknown = sorted(set(options) - known)
        if unknown:
            raise InputError(
                f"execute: {name}: {', '.join(map(repr, unknown))} is not one of nvFuser's "
                f"options (they are: {', '.join(sorted(known))}); kfuse accepts them and "
                "changes nothing for them (its own settings are kfuse.knobs and kfuse.switches)"
            )
