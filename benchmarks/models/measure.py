"""Check, then time, one case at one shape and dtype: kfuse, torch.compile and torch eager.

Each peer's first call is checked output by output against the float64 reference (with
benchmarks/run.py's `check`); a peer that mismatches is still timed, and its row says so
(`status` "mismatch"), so that no wrong result is timed silently. Times are medians of CUDA
event times (benchmarks/run.py's `time_ms`) with L2 flushed before every timed call by a read
of twice its size.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from kfuse.errors import DefinitionError
from models.case import DTYPES, Case, Shape, bytes_moved, first_call

PEERS = ("kfuse", "torch.compile", "torch eager")


def definition(case: Case, dtype: str) -> tuple[Any, str]:
    """(the FusionDefinition, a note): the case's own definition, or its workaround when kfuse
    cannot build the own one (the note then says what changed and why)."""
    try:
        return case.define(DTYPES[dtype]), ""
    except DefinitionError as exc:
        if case.workaround is None:
            raise
        define, note = case.workaround
        return define(DTYPES[dtype]), f"workaround: {note} (nvFuser's spelling fails: {exc})"


def tolerance(torch: Any, result: Any, reference: Any) -> tuple[float, float]:
    """(atol, rtol) for one output, from its dtype and the reference's largest magnitude.

    rtol is run.py's for the dtype (1e-2 for bf16 and half, 1e-5 for float32). atol follows
    the output's scale: for float32 1e-5 of its largest magnitude, and at least 1e-5 (a sum
    over many rows, a weight's gradient, a row's mean carry float32 rounding of their terms'
    size however small the result itself: the inputs are unit-scale randn, and a mean of
    about 0.05 over 4096 of them was 9e-7 off in float32); for bf16 and half run.py's 1e-2,
    but less for outputs whose values are all small (a softmax over 32768 rows is about 3e-5
    everywhere: 1e-2 would pass anything)."""
    amax = float(reference.abs().max()) if reference.numel() else 0.0
    amax = amax if amax > 0 else 1.0
    if result.dtype in (torch.bfloat16, torch.float16):
        return 1e-2 * min(1.0, amax), 1e-2
    return 1e-5 * max(1.0, amax), 1e-5


def relative_error(result: Any, reference: Any) -> float:
    """||result - reference|| / ||reference|| (METHOD.md's figure), in float64."""
    den = float(reference.norm())
    num = float((result.double() - reference).norm())
    return num / den if den else num


def check_outputs(
    torch: Any, peer: str, outputs: Sequence[Any], references: Sequence[Any], check: Any
) -> dict[str, Any]:
    """{'check': 'ok' or the mismatches, 'rel_err': the worst output's relative error}."""
    if len(outputs) != len(references):
        return {"check": f"MISMATCH {peer}: {len(outputs)} outputs, expected {len(references)}"}
    problems, worst = [], 0.0
    for i, (out, ref) in enumerate(zip(outputs, references)):
        if tuple(out.shape) != tuple(ref.shape):
            problems.append(f"output {i}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
            continue
        if out.dtype == torch.bool:  # a mask: exact
            wrong = int((out.cpu() != ref.cpu()).sum())
            if wrong:
                problems.append(f"output {i}: {wrong} of {out.numel()} Bool elements differ")
            continue
        status = check(f"{peer} output {i}", out, ref, out.dtype, tolerance(torch, out, ref))
        if status != "ok":
            problems.append(f"output {i}: {status}")
        worst = max(worst, relative_error(out, ref))
    return {"check": "; ".join(problems) or "ok", "rel_err": worst}


def l2_flusher(torch: Any) -> tuple[Callable[[], Any], int]:
    """(a function that evicts L2 by reading twice its size, the L2 size in bytes). A read
    leaves clean lines: no write-back of the flush lands in the timed call."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = int(getattr(props, "L2_cache_size", 0) or 64 << 20)
    buffer = torch.ones(2 * l2 // 4, dtype=torch.float32, device="cuda")
    return buffer.sum, l2


def program_summary(fd: Any, inputs: list[Any]) -> dict[str, Any]:
    """kfuse's segments and schedulers for these inputs, and the kernels its last run launched."""
    segments = fd.segments(inputs)
    out: dict[str, Any] = {
        "segments": len(segments),
        "schedulers": [s.scheduler.value for s in segments],
    }
    program = fd.last_program()
    if program is not None:
        runner = getattr(program, "runner", None)
        if runner is None:
            out["kernels"] = len(program.launches)
        else:  # a segmented program: each segment's own last program
            out["kernels"] = sum(len(getattr(step.last, "launches", ())) for step in runner.steps)
    return out


def fresh_compile(torch: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    """torch.compile(fn, dynamic=False) with Dynamo's caches emptied first, so that every shape
    is compiled for itself and no recompilation limit is reached."""
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


def measure(
    torch: Any,
    case: Case,
    shape: Shape,
    dtype: str,
    *,
    reps: int,
    copy_gbs: float,
    flush: Callable[[], Any],
    suite: Any,
    peers: Sequence[str] = PEERS,
    device: str = "cuda",
    kernels: bool = False,
) -> dict[str, Any]:
    """One row: every peer checked, then timed. `suite` is benchmarks/run.py (check, time_ms);
    device "cpu" (kfuse's host emulator) is for the tests, with a suite whose time_ms does
    not use CUDA events. `kernels`: also one more kfuse call (L2 flushed) under kfuse's CUPTI
    profiler, its kernels in row["kernel_profile"] (kernel_profile_rows)."""
    row: dict[str, Any] = {
        "family": case.family,
        "case": case.name,
        "source": case.source,
        "shape": list(shape),
        "dtype": dtype,
    }
    if case.skip:
        row["status"] = f"skipped: {case.skip}"
        return row
    started = time.perf_counter()
    torch.manual_seed(0)
    inputs = case.make_inputs(torch, shape, getattr(torch, dtype), device)
    row["input_shapes"] = [list(t.shape) for t in inputs if hasattr(t, "shape")]
    references = case.reference(*inputs)
    fns: dict[str, Callable[[], Any]] = {}
    results: dict[str, dict[str, Any]] = {}
    fd = None
    for peer in peers:
        first = time.perf_counter()
        try:
            if peer == "kfuse":
                fd, note = definition(case, dtype)
                if note:
                    row["note"] = note
                fns[peer], outputs = first_call(case, fd.execute, inputs, as_list=True)
            elif peer == "torch.compile":
                fn = fresh_compile(torch, case.torch_fn)
                fns[peer], outputs = first_call(case, fn, inputs)
            else:
                fns[peer], outputs = first_call(case, case.torch_fn, inputs)
            if device == "cuda":
                torch.cuda.synchronize()
            results[peer] = {"first_call_s": time.perf_counter() - first}
            expected = case.reference_for(peer, inputs, outputs, references)
            results[peer].update(check_outputs(torch, peer, outputs, expected, suite.check))
            if peer == "torch eager":
                row["bytes"] = bytes_moved(inputs, outputs)
            del outputs, expected
        except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
            fns.pop(peer, None)
            results[peer] = {"error": describe(exc)}
    del references
    if fd is not None and "kfuse" in fns:
        try:
            row.update(program_summary(fd, inputs))
        except Exception as exc:  # noqa: BLE001
            row["segments_error"] = describe(exc)
    if "bytes" not in row:  # eager failed or was not run: count the outputs of another peer
        for fn in fns.values():
            written = [inputs[k] for k in case.updates] if case.updates else fn()
            row["bytes"] = bytes_moved(inputs, written)
            break
    for peer, fn in fns.items():
        try:
            ms = suite.time_ms(torch, fn, reps, before=flush)
        except Exception as exc:  # noqa: BLE001
            results[peer]["error"] = describe(exc)
            continue
        gbs = row["bytes"] / (ms * 1e-3) / 1e9
        results[peer].update(us=ms * 1e3, gbs=gbs, fraction_of_copy=gbs / copy_gbs)
    if kernels and "kfuse" in fns:
        try:
            row["kernel_profile"] = kernel_profile_rows(fns["kfuse"], flush)
        except Exception as exc:  # noqa: BLE001 - no CUPTI: the row keeps its timings
            row["kernel_profile_error"] = describe(exc)
    row["peers"] = results
    row["status"] = status_of(results)
    k, c = results.get("kfuse", {}), results.get("torch.compile", {})
    if "us" in k and "us" in c and k.get("check") == "ok" and c.get("check") == "ok":
        row["ratio"] = c["us"] / k["us"]  # kfuse's speed over torch.compile's
    row["elapsed_s"] = time.perf_counter() - started
    return row


def kernel_profile_rows(call: Callable[[], Any], flush: Callable[[], Any]) -> list[dict[str, Any]]:
    """Where one kfuse call's time goes: each kernel it launched (segment, scheduler, name, GPU
    time, the bandwidth of its segment's bytes, grid, block, registers), from
    kfuse.PythonProfiler around one call after an L2 flush."""
    import kfuse

    flush()
    with kfuse.PythonProfiler() as prof:
        call()
    return [
        {
            "segment": k.segment_id,
            "scheduler": k.scheduler,
            "name": k.name,
            "us": k.time_ms * 1e3,
            "gbs": k.effective_bandwidth_gbs,
            "grid": list(k.grid),
            "block": list(k.block),
            "registers": k.registers,
        }
        for k in prof.profile.kernel_profiles
    ]


def describe(exc: BaseException) -> str:
    """An exception in one line: its type and the first lines of its message (torch.compile's
    BackendCompilerFailed says what failed on its second line), at most 300 characters."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " / ".join(lines[:3])
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def status_of(results: dict[str, dict[str, Any]]) -> str:
    """'ok', 'mismatch' (a peer's result is wrong) or 'error' (a peer failed)."""
    if any("error" in r for r in results.values()):
        return "error"
    if any(r.get("check") != "ok" for r in results.values()):
        return "mismatch"
    return "ok"
