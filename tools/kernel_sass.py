"""What the GPU would run for a model-suite case, read on this machine (no GPU needed): each
kernel of the case's plan on a device profile, compiled as the CUDA backend compiles it (the
register fit included), with its registers, local-memory accesses, barriers and the counts of
its sm_90 SASS instructions by opcode:

    python3 tools/kernel_sass.py dropout_layernorm_fwd:8192x8192 rope_without_cat:8x4096x32x128 \
        --top 12 --out /tmp/sass

--out writes each kernel's CUDA source and SASS there (<kernel>.cu, <kernel>.sass). Each
--edit FILE.py (tools/kernel_times.py's: `edit(name, source) -> source`) adds a line for every
kernel it changes, counted the same way: a codegen idea's instructions before a GPU measures
it. Counting here found the row-end branch an element (BSSY, BRA, BSYNC) and the rope
reduction's loads issued in four rounds; a hand edit converting bf16 elements from their
32-bit words took the dropout + layer norm forward [8192, 8192] from 1968 to 1784.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kfuse.schedule.types import SchedulerType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

# An instruction line of nvdisasm -c: "/*0250*/   @!P3 BRA `(.L_x_5) ;" -> opcode "BRA".
_INSTRUCTION = re.compile(r"/\*[0-9a-f]+\*/\s+(?:@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_]*)")


def opcode_counts(sass: str) -> collections.Counter[str]:
    """Instructions by opcode (the part before the first dot: LDG.E.128 is LDG)."""
    return collections.Counter(m.group(1) for m in map(_INSTRUCTION.search, sass.splitlines()) if m)


def planned_kernels(case_size: str, dtype: str, profile: str) -> list[tuple[SchedulerType, Any]]:
    """(scheduler, GeneratedKernel) of every kernel the case's call would run on `profile`:
    the executor's own stages (the fusion canonicalized, boundary reshapes folded, segments
    merged or each compiled as a segmented run compiles it), with loading replaced by a
    record of what would be loaded."""
    import torch
    from models import measure, registry

    from kfuse.engine import compiler
    from kfuse.engine.program import SegmentedProgram
    from kfuse.schedule.sub_fusion import synthetic_info
    from planning import gpu_info

    try:
        case, shape = registry.case_and_shape(case_size)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    fd, _ = measure.definition(case, dtype)
    inputs = case.make_inputs(torch, shape, getattr(torch, dtype), "meta")
    shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in inputs]
    strides = [tuple(t.stride()) if isinstance(t, torch.Tensor) else None for t in inputs]
    fusion = compiler.stage_canonicalize(fd.fusion)  # what the executor schedules
    info = gpu_info(types.SimpleNamespace(fusion=fusion), shapes, profile, strides)
    loaded: list[tuple[SchedulerType, Any]] = []
    real_load, real_compile = compiler.KernelCompiler.load, compiler.KernelCompiler.compile

    def record(self: Any, kernel: Any, call_info: Any) -> Any:
        loaded.append((kernel.scheduler, kernel))
        return real_load(self, kernel, call_info)

    compiler.KernelCompiler.load = record  # type: ignore[method-assign]
    compiler.KernelCompiler.compile = lambda self, source, name, info: None  # type: ignore[method-assign]
    try:
        program = compiler.compile_fusion(fusion, info, None, segment=True)
        if isinstance(program, SegmentedProgram) and program.runner is not None:
            base = program.folded.info if program.folded is not None else info
            for plan in program.runner.segmented.plans:
                segment_info = synthetic_info(plan.fusion, plan.inputs, base)
                compiler.compile_segment(plan.fusion, segment_info)
    finally:
        compiler.KernelCompiler.load = real_load  # type: ignore[method-assign]
        compiler.KernelCompiler.compile = real_compile  # type: ignore[method-assign]
    return loaded


def load_edit(path: str) -> Any:
    """The `edit(name, source)` function of the Python file at `path`."""
    namespace: dict[str, Any] = {}
    exec(compile(Path(path).read_text(), path, "exec"), namespace)
    return namespace["edit"]


def disassemble(cubin: bytes, tool: str) -> str:
    from kfuse.engine.dump import DISASSEMBLERS

    with tempfile.TemporaryDirectory(prefix="kfuse-sass-") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        Path(path).write_bytes(cubin)
        args = DISASSEMBLERS[os.path.basename(tool)]
        return subprocess.run(
            [tool, *args, path], capture_output=True, text=True, check=True, timeout=120
        ).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", help="CASE or CASE:SIZE (default: its quick size)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--profile", default="h200", help="device profile (kfuse.devices)")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--top", type=int, default=10, help="opcodes listed a kernel")
    parser.add_argument("--out", default="", help="folder for each kernel's .cu and .sass")
    parser.add_argument("--edit", action="append", default=[], help="FILE.py with edit()")
    args = parser.parse_args()
    edits = [(Path(path).name, load_edit(path)) for path in args.edit]

    from kfuse.engine.dump import find_disassembler
    from kfuse.runtime.backends import spill_fallback
    from kfuse.runtime.backends.cubin_info import frame_bytes, registers
    from kfuse.runtime.backends.cuda import fitted_compile, nvrtc_options

    tool, tried = find_disassembler()
    if tool is None:
        raise SystemExit(f"no nvdisasm or cuobjdump in {', '.join(tried)}")
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    for case in args.cases:
        print(f"## {case} {args.dtype} on {args.profile} ({args.arch})")
        for scheduler, kernel in planned_kernels(case, args.dtype, args.profile):
            print(f"  {kernel.name} [{scheduler}] grid {kernel.grid} block {kernel.block}")
            variants = [("as is", kernel.source)]
            variants += [(label, edit(kernel.name, kernel.source)) for label, edit in edits]
            for label, text in variants:
                if label != "as is" and text == kernel.source:
                    continue
                source, cubin = fitted_compile(text, kernel.name, args.arch, nvrtc_options())
                sass = disassemble(cubin, tool)
                ops = opcode_counts(sass)
                bounds = re.search(r"__launch_bounds__\([^)]*\)", source)
                fallback = " (its spill fallback)" if spill_fallback.chose_fallback(source) else ""
                print(
                    f"    {label}{fallback}: {bounds.group(0) if bounds else 'unbounded'},"
                    f" registers {registers(cubin)}, {sum(ops.values())} instructions, local"
                    f" {ops['LDL'] + ops['STL']} ({frame_bytes(cubin)} bytes a thread),"
                    f" barriers {ops['BAR']}"
                )
                print("      " + " ".join(f"{op} {n}" for op, n in ops.most_common(args.top)))
                if out is not None:
                    stem = kernel.name if label == "as is" else f"{kernel.name}.{label}"
                    (out / f"{stem}.cu").write_text(source)
                    (out / f"{stem}.sass").write_text(sass)


if __name__ == "__main__":
    main()
