"""Lightning Thunder drives kfuse: the acceptance check of kfuse as Thunder's nvFuser.

For each training step of tools/thunder_steps.py, and two whole models' steps
(tools/thunder_models.py: the nanoGPT and Llama 2 that Thunder's wheel ships): thunder.jit
with kfuse installed as nvfuser_direct (before Thunder's import), forward and backward; the
loss and every gradient
compared with eager torch in float64; the trace's fusion regions (nvFusion) counted and kfuse's
executions counted, with every op Thunder left to torch listed (a compute op there that is not
a matrix product or a view is a fallback, and fails the step); a dropout checked for its keep
rate and for replays that differ; then each step timed (CUDA events, medians) for Thunder+kfuse,
Thunder with its torch.compile executor and torch.compile alone, in this process.

    python3 tools/thunder_check.py --json out.json            # the GPU run (~4 minutes, H100)
    python3 tools/thunder_check.py --quick --json out.json    # small sizes, no peers (~1 minute)
    python3 tools/thunder_check.py --nv-matmul ...            # matmul and linear on kfuse too
    python3 tools/thunder_check.py --emulator   # no GPU: CPU tensors on kfuse's emulator
                                                # (tools/thunder_emulator_shim.py)

Exit status 0 when every step matched and ran on kfuse.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2}
"""Largest ||thunder - eager64|| / ||eager64|| accepted, per input dtype (METHOD.md's bands)."""

# Ops Thunder's nvFuser executor leaves to torch by design: matrix products (unless the
# nv_enable_linear/matmul options say otherwise), the views around them, and the embedding's
# and nll_loss's backwards (Thunder 0.2.6 has no nvFuser translation of either).
EXPECTED_ON_TORCH = frozenset(
    {
        "matmul",
        "linear",
        "permute",
        "transpose",
        "reshape",
        "view",
        "expand",
        "broadcast_in_dim",
        "squeeze",
        "unsqueeze",
        "contiguous",
        "t",
        "to",
        "empty",
        "copy_",
        "clone",
        "shallow_copy",
        "torch.ops.aten.embedding_backward",
        "torch_nll_loss_backward_impl",
        "torch_prims_reshape_impl",
    }
)
# Bookkeeping: unpacking, deletion, the RNG state's update, in-place updates' alias records.
NOT_COMPUTE = (
    "unpack_",
    "python_",
    "clear_mutable_collection",
    "check_",
    "return",
    "del",
    "get_",
    "update_aliases",
)
# Thunder's nvFuser flash attention takes fp16 and bf16 only (its grad rule refuses others).
# nanoGPT takes the cross-entropy of its bf16 logits, which Thunder 0.2.6 hands to nvFuser's
# cross-entropy translation though its checker asks for float32, declaring the saved row
# maximum float32 where the translation's max keeps bf16: the backward's region then
# defines it Float and gets bf16 (a kfuse InputError; Thunder's to fix).
ONLY_DTYPES = {"sdpa": ("bfloat16",), "block": ("bfloat16",), "nanogpt": ("float32",)}


def import_thunder(emulator: bool) -> Any:
    """kfuse installed as nvfuser_direct, then Thunder imported (the order Thunder needs)."""
    if emulator:
        import thunder_emulator_shim

        return thunder_emulator_shim.import_thunder_on_emulator()
    import kfuse.nvfuser_direct as nvfuser_direct

    nvfuser_direct.install()
    import thunder

    return thunder


class ExecuteCounter:
    """Counts kfuse FusionDefinition.execute calls (each runs the region's kernels on kfuse)."""

    def __init__(self) -> None:
        import kfuse.nvfuser_direct as nvfuser_direct

        self.calls = 0
        cls = nvfuser_direct.FusionDefinition
        real = cls.execute
        counter = self

        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            counter.calls += 1
            return real(self, *args, **kwargs)

        cls.execute = counted  # type: ignore[method-assign]


def _rel_err(out: Any, ref: Any) -> float:
    import torch

    if out is None or ref is None:
        return float("inf") if (out is None) != (ref is None) else 0.0
    out64, ref64 = out.detach().double().cpu(), ref.detach().double().cpu()
    if not torch.isfinite(out64).all():
        return float("inf")
    denom = ref64.norm().item()
    return (out64 - ref64).norm().item() / (denom if denom > 0 else 1.0)


def _copies(args: list[Any], as_float64: bool) -> list[Any]:
    import torch

    out = []
    for a in args:
        if not isinstance(a, torch.Tensor):
            out.append(a)
            continue
        c = a.detach().clone()
        if as_float64 and c.is_floating_point():
            c = c.double()
        out.append(c.requires_grad_(a.requires_grad))
    return out


def run_once(fn: Any, args: list[Any], inplace: bool) -> list[Any]:
    """The results a step is judged by: its loss and gradients, or its updated tensors."""
    if inplace:
        fn(*args)
        return list(args)
    loss = fn(*args)
    loss.backward()
    return [loss] + [a.grad for a in args if getattr(a, "requires_grad", False)]


def region_report(thunder: Any, jitted: Any, inplace: bool) -> dict[str, Any]:
    """nvFusion regions of the forward and backward traces, and the ops that ran on torch."""
    traces = [("forward", thunder.last_traces(jitted)[-1])]
    if not inplace:
        traces.append(("backward", thunder.last_backward_traces(jitted)[-1]))
    report: dict[str, Any] = {"on_torch": [], "fallbacks": [], "fused_ops": set()}
    for label, trace in traces:
        names = [b.sym.name for b in trace.bound_symbols]
        for b in trace.bound_symbols:
            if b.sym.name.startswith("nvFusion"):
                report["fused_ops"].update(sub.sym.name for sub in b.subsymbols)
        report[f"{label}_regions"] = sum(n.startswith("nvFusion") for n in names)
        for n in names:
            if n.startswith("nvFusion") or n.startswith(NOT_COMPUTE):
                continue
            report["on_torch"].append(n)
            if n not in EXPECTED_ON_TORCH:
                report["fallbacks"].append(n)
    report["fused_ops"] = sorted(report["fused_ops"])  # the translations that ran on kfuse
    return report


def check_step(
    thunder: Any, counter: ExecuteCounter, name: str, case: Any, dtype_name: str
) -> dict[str, Any]:
    """Thunder+kfuse against eager torch in float64 for one step."""
    from thunder.executors.nvfuserex import nvfuserex

    jitted = thunder.jit(case.fn, executors=[nvfuserex], **case.options)
    before = counter.calls
    got = run_once(jitted, _copies(case.args, False), case.inplace)
    ref = run_once(case.fn, _copies(case.args, True), case.inplace)
    eager = run_once(case.fn, _copies(case.args, False), case.inplace)
    result: dict[str, Any] = {"step": name, "dtype": dtype_name}
    result["eager_rel_err"] = max(_rel_err(o, r) for o, r in zip(eager, ref, strict=True))
    return _judged(result, thunder, jitted, got, ref, case.inplace, counter.calls - before)


def check_model(
    thunder: Any, counter: ExecuteCounter, name: str, size: Any, dtype_name: str, device: str
) -> tuple[dict[str, Any], Any]:
    """A whole model's loss and parameter gradients (tools/thunder_models.py) against its
    float64 copy in eager torch; returns the result and a Case that times its step."""
    import torch
    from thunder.executors.nvfuserex import nvfuserex
    from thunder_models import loss_and_grads, make_model, model_inputs, reference_of
    from thunder_steps import Case

    module = make_model(name, size, getattr(torch, dtype_name), device)
    reference = reference_of(module)
    tokens, targets = model_inputs(size, device)
    jitted = thunder.jit(module, executors=[nvfuserex])
    before = counter.calls
    got = loss_and_grads(jitted, tokens, targets)
    ref = loss_and_grads(reference, tokens, targets)
    result: dict[str, Any] = {"step": name, "dtype": dtype_name}
    result = _judged(result, thunder, jitted, got, ref, False, counter.calls - before)
    return result, Case(module, [tokens, targets])


def _judged(
    result: dict[str, Any],
    thunder: Any,
    jitted: Any,
    got: list[Any],
    ref: list[Any],
    inplace: bool,
    executes: int,
) -> dict[str, Any]:
    """The largest relative error, the regions and the ops on torch, and the verdicts."""
    result["max_rel_err"] = max(_rel_err(o, r) for o, r in zip(got, ref, strict=True))
    result.update(region_report(thunder, jitted, inplace))
    result["kfuse_executes"] = executes
    ran_on_kfuse = result["forward_regions"] > 0 and executes > 0
    if not inplace:
        ran_on_kfuse = ran_on_kfuse and result["backward_regions"] > 0
    result["ran_on_kfuse"] = ran_on_kfuse and not result["fallbacks"]
    # A step's library call (flash attention in bf16) can be less exact than the tolerance in
    # eager torch too: kfuse, which calls the same kernel, is then held to twice eager torch's
    # own error in the step's dtype (eager_rel_err, where the check measured it).
    allowed = max(TOLERANCE[result["dtype"]], 2 * result.get("eager_rel_err", 0.0))
    result["matched"] = result["max_rel_err"] <= allowed
    return result


def check_dropout(thunder: Any, counter: ExecuteCounter, case: Any) -> dict[str, Any]:
    """A dropout's keep rate (p=0.1), its kept values scaled by 1/0.9, the backward replaying
    the forward's mask, and two calls drawing different masks."""
    from thunder.executors.nvfuserex import nvfuserex

    jitted = thunder.jit(_dropout, executors=[nvfuserex])
    x = case.args[0].detach().clone().requires_grad_(True)
    before = counter.calls
    y1 = jitted(x)
    y1.backward(y1.detach() * 0 + 1)
    y2 = jitted(x)
    kept = y1 != 0
    keep_rate = kept.double().mean().item()
    n = kept.numel()
    sigma = (0.9 * 0.1 / n) ** 0.5
    scaled_err = _rel_err(y1[kept], x.detach()[kept] / 0.9)
    # Where the backward's mask is not the forward's: positions, as a failure should say.
    # Only where x is not 0: y1 is 0 there whether kept or not (float32 randn gives an exact
    # 0 about once in 2**24 draws; the step's 8M inputs often hold one).
    informative = x.detach() != 0
    grad_off = int((((x.grad != 0) != kept) & informative).sum().item())
    result = {
        "step": "dropout",
        "keep_rate": keep_rate,
        "scaled_rel_err": scaled_err,
        "grad_mask_differs_at": grad_off,
        "kfuse_executes": counter.calls - before,
        "masks_differ": bool((kept != (y2 != 0)).any()),
        "matched": abs(keep_rate - 0.9) < 6 * sigma + 1e-3
        and scaled_err < TOLERANCE["float32"]
        and grad_off == 0,
    }
    result.update(region_report(thunder, jitted, False))
    result["ran_on_kfuse"] = result["forward_regions"] > 0 and result["backward_regions"] > 0
    result["matched"] = result["matched"] and result["masks_differ"]
    return result


def check_attention_dropout(thunder: Any, counter: ExecuteCounter, case: Any) -> dict[str, Any]:
    """Attention written out with dropout (p=0.1) on its probabilities (float32)."""
    from thunder_steps import attention_written_out

    def with_dropout(q: Any, k: Any, v: Any, g: Any) -> Any:
        return attention_written_out(q, k, v, g, dropout_p=0.1)

    return _check_replayed_dropout(thunder, counter, case, with_dropout, "attention_dropout", {})


def check_sdpa_dropout(thunder: Any, counter: ExecuteCounter, case: Any) -> dict[str, Any]:
    """Causal SDPA with dropout 0.1 through nvFuser's flash attention (kfuse's sdpfa_fwd and
    sdpfa_bwd: the backward replays torch's philox state; bf16, CUDA only), against eager
    torch's flash attention from the same generator state: ATen's kernel draws the same mask
    for both, so the gradients agree to the dtype's rounding where kfuse's forward took torch's
    seed and offset and its backward replayed them, and differ by the masks' difference (about
    a fifth of the probabilities) where either did not. (The loss-equals-sum(v.grad * v)
    identity of _check_replayed_dropout is ill-conditioned in bf16: a loss of random-sign
    terms that nearly cancel made its relative error anything from 1e-3 to 9e-2 on one H100.)"""
    import torch
    import torch.nn.functional as F
    from thunder.executors.nvfuserex import nvfuserex
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def with_dropout(q: Any, k: Any, v: Any, g: Any) -> Any:
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)
        return (out.float() * g).sum()

    jitted = thunder.jit(with_dropout, executors=[nvfuserex], nv_enable_sdpa=True)
    seed = 20261206
    grads = {}
    before = counter.calls
    for label, fn in (("kfuse", jitted), ("eager", with_dropout), ("plain", case.fn)):
        args = _copies(case.args, False)
        torch.manual_seed(seed)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            fn(*args).backward()
        grads[label] = [a.grad for a in args if getattr(a, "requires_grad", False)]
    executes = counter.calls - before
    tolerance = TOLERANCE["bfloat16"]
    err = max(_rel_err(o, r) for o, r in zip(grads["kfuse"], grads["eager"], strict=True))
    dropped = max(_rel_err(o, r) for o, r in zip(grads["eager"], grads["plain"], strict=True))
    result = {
        "step": "sdpa_dropout",
        "dtype": "bfloat16",
        "max_rel_err": err,
        "rel_err_without_dropout": dropped,
        "kfuse_executes": executes,
        # and the dropout mattered: its gradients are not those of attention without it
        "matched": err <= tolerance and dropped > 3 * tolerance,
    }
    result.update(region_report(thunder, jitted, False))
    result["ran_on_kfuse"] = result["forward_regions"] > 0 and not result["fallbacks"]
    return result


def _check_replayed_dropout(
    thunder: Any, counter: ExecuteCounter, case: Any, fn: Any, label: str, options: dict[str, Any]
) -> dict[str, Any]:
    """Attention whose probabilities D a dropout masks: the loss sum(g * (D @ v)) is linear in
    v, so it equals sum(v.grad * v) when the backward replays the forward's mask (up to the
    dtype's rounding); and it differs from the loss without dropout (case.fn)."""
    from thunder.executors.nvfuserex import nvfuserex

    jitted = thunder.jit(fn, executors=[nvfuserex], **options)
    q, k, v, g = _copies(case.args, False)
    before = counter.calls
    loss = jitted(q, k, v, g)
    loss.backward()
    replayed = _rel_err((v.grad.double() * v.detach().double()).sum(), loss.detach())
    plain = case.fn(*_copies(case.args, False)).detach()
    dtype_name = str(q.dtype).removeprefix("torch.")
    tolerance = TOLERANCE[dtype_name]
    result = {
        "step": label,
        "dtype": dtype_name,
        "max_rel_err": replayed,
        "kfuse_executes": counter.calls - before,
        "matched": replayed < tolerance and _rel_err(loss, plain) > 3 * tolerance,
    }
    result.update(region_report(thunder, jitted, False))
    result["ran_on_kfuse"] = result["forward_regions"] > 0 and not result["fallbacks"]
    return result


def _dropout(x: Any) -> Any:
    import torch.nn.functional as F

    return F.dropout(x, p=0.1, training=True)


def time_step(fn: Any, case: Any, reps: int, breakdown: dict[str, Any] | None = None) -> float:
    """Median milliseconds of one forward+backward (or one in-place update), CUDA events;
    with `breakdown` (a dict), its kernels' time and count per step put there too
    (tools/thunder_breakdown.py)."""
    import torch

    args = _copies(case.args, False)
    leaves = [a for a in args if getattr(a, "requires_grad", False)]

    def once() -> None:
        for a in leaves:
            a.grad = None
        run_once(fn, args, case.inplace)

    for _ in range(3):
        once()
    if breakdown is not None:
        from thunder_breakdown import kernel_time

        breakdown.update(kernel_time(once))
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        once()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def time_peers(
    thunder: Any, case: Any, reps: int, peers: bool, breakdown: bool = False
) -> dict[str, Any]:
    import torch
    from thunder.executors.nvfuserex import nvfuserex

    engines = {"thunder+kfuse": thunder.jit(case.fn, executors=[nvfuserex], **case.options)}
    if peers:
        from thunder.executors.torch_compile import torch_compile_ex

        engines["thunder+torch.compile"] = thunder.jit(case.fn, executors=[torch_compile_ex])
        engines["torch.compile"] = torch.compile(case.fn)
    out: dict[str, Any] = {}
    for label, fn in engines.items():
        try:
            parts: dict[str, Any] | None = {} if breakdown else None
            out[label] = time_step(fn, case, reps, parts)
            if parts:  # each GPU activity's count and time per step: in the JSON only
                out.setdefault("by_name", {})[label] = parts.pop("by_name")
                for key, value in parts.items():
                    out[f"{label} {key}"] = value
        except Exception as exc:  # a peer's failure is reported, not fatal to the table
            out[label] = float("nan")
            print(f"  timing {label}: {type(exc).__name__}: {str(exc)[:200]}")
    return out


RANDOM_CHECKS = (
    ("dropout", check_dropout, "layernorm", "float32"),
    ("attention_dropout", check_attention_dropout, "attention", "float32"),
    ("sdpa_dropout", check_sdpa_dropout, "sdpa", "bfloat16"),
)
"""Checks of random ops: label, check, the step and dtype whose inputs it takes."""
CUDA_ONLY = ("sdpa_dropout",)
"""torch's flash attention on CPU tensors has no dropout."""


def _sizes(mode: str) -> Any:
    from thunder_steps import Size

    if mode == "emulator":  # the emulator runs every thread of every block on the CPU
        return Size(batch=1, seq=8, hidden=16, heads=2, vocab=32)
    if mode == "quick":
        return Size(batch=2, seq=256, hidden=512, heads=8, vocab=4096)
    return Size(batch=4, seq=1024, hidden=2048, heads=16, vocab=32768)


def _print_table(results: list[dict[str, Any]], timings: list[dict[str, Any]]) -> None:
    print(
        f"{'step':<20}{'dtype':<10}{'rel err':>10}  {'regions f/b':>11}  {'kfuse':>5}  ok  on torch"
    )
    for r in results:
        regions = f"{r.get('forward_regions', '-')}/{r.get('backward_regions', '-')}"
        ok = "yes" if r.get("matched") and r.get("ran_on_kfuse") else "NO"
        err = r.get("max_rel_err", r.get("keep_rate", float("nan")))
        on_torch = ",".join(sorted(set(r.get("on_torch", []))))
        print(
            f"{r['step']:<20}{r.get('dtype', ''):<10}{err:>10.2e}  {regions:>11}  "
            f"{r.get('kfuse_executes', 0):>5}  {ok:<3} {on_torch}"
            f"{'  ' + r['error'] if 'error' in r else ''}"
        )
    if timings:
        labels = [k for k in timings[0] if k not in ("step", "dtype", "by_name")]
        widths = [max(24, len(k) + 2) for k in labels]
        head = "".join(f"{k:>{w}}" for k, w in zip(labels, widths))
        print(f"\n{'step (ms, median)':<18}{'dtype':<10}" + head)
        for t in timings:
            cells = "".join(f"{t.get(k, float('nan')):>{w}.3f}" for k, w in zip(labels, widths))
            print(f"{t['step']:<18}{t['dtype']:<10}" + cells)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, fp32 and bf16, no peers' timing"
    )
    parser.add_argument(
        "--emulator", action="store_true", help="CPU tensors on kfuse's host emulator"
    )
    parser.add_argument("--steps", default="", help="comma-separated subset of steps and models")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument(
        "--budget-s", type=float, default=170.0, help="no timing starts after this many seconds"
    )
    parser.add_argument(
        "--nv-matmul",
        action="store_true",
        help="Thunder's nv_enable_linear/nv_enable_matmul on: matrix products on kfuse too",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="each engine's GPU time and kernel count per step too (tools/thunder_breakdown.py)",
    )
    parser.add_argument("--json", type=Path, help="write the results here (after every step)")
    return parser.parse_args(argv)


class Run:
    """One invocation's settings, results and timings; the JSON is rewritten after every
    step, so that a run cut short by its time limit still leaves what it found."""

    def __init__(self, args: argparse.Namespace, thunder: Any) -> None:
        import torch

        self.args, self.thunder = args, thunder
        self.mode = "emulator" if args.emulator else "quick" if args.quick else "full"
        self.device = "cpu" if args.emulator else "cuda"
        self.size = _sizes(self.mode)
        self.counter = ExecuteCounter()
        self.start = time.perf_counter()
        self.results: list[dict[str, Any]] = []
        self.timings: list[dict[str, Any]] = []
        device_name = torch.cuda.get_device_name() if self.device == "cuda" else "cpu (emulator)"
        self.info = {"mode": self.mode, "size": vars(self.size), "torch": torch.__version__,
                     "thunder": thunder.__version__, "device": device_name}  # fmt: skip

    def record(self, result: dict[str, Any]) -> None:
        self.results.append(result)
        ok = "ok" if result.get("matched") and result.get("ran_on_kfuse") else "FAILED"
        seconds = time.perf_counter() - self.start
        print(f"[{seconds:5.0f} s] {result['step']} {result.get('dtype', '')}: {ok}", flush=True)
        self.save()

    def save(self) -> None:
        if self.args.json:
            data = {"info": self.info, "results": self.results, "timings": self.timings}
            self.args.json.write_text(json.dumps(data, indent=1))

    def failed(self, label: str, dtype_name: str, exc: Exception) -> None:
        traceback.print_exc()
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
        self.record({"step": label, "dtype": dtype_name, "matched": False, "error": error})


def run_random_checks(run: Run) -> None:
    import torch
    from thunder_steps import make_case

    for label, check, inputs_of, dtype_name in RANDOM_CHECKS:
        if run.device == "cpu" and label in CUDA_ONLY:
            continue
        try:
            case = make_case(inputs_of, run.size, getattr(torch, dtype_name), run.device)
            run.record(check(run.thunder, run.counter, case))
        except Exception as exc:
            run.failed(label, dtype_name, exc)


def run_step(run: Run, name: str, dtype_name: str) -> None:
    """Check one step (or model) in one dtype, then time it unless timed already."""
    import torch
    from thunder_models import MODELS
    from thunder_steps import make_case

    torch.manual_seed(0)
    try:
        if name in MODELS:
            result, case = check_model(
                run.thunder, run.counter, name, run.size, dtype_name, run.device
            )
        else:
            case = make_case(name, run.size, getattr(torch, dtype_name), run.device)
            if run.args.nv_matmul:
                case.options.update(nv_enable_linear=True, nv_enable_matmul=True)
            result = check_step(run.thunder, run.counter, name, case, dtype_name)
    except Exception as exc:
        run.failed(name, dtype_name, exc)
        return
    run.record(result)
    # Timed in one dtype a step (the first it runs in): each peer compiles anew.
    timed_before = any(t["step"] == name for t in run.timings)
    in_budget = time.perf_counter() - run.start < run.args.budget_s
    if run.device == "cuda" and in_budget and not timed_before:
        timed = time_peers(run.thunder, case, run.args.reps, run.mode == "full", run.args.breakdown)
        run.timings.append({"step": name, "dtype": dtype_name, **timed})
        run.save()


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    run = Run(args, import_thunder(args.emulator))
    from thunder_models import MODELS
    from thunder_steps import STEPS

    run_random_checks(run)
    for name in [s for s in args.steps.split(",") if s] or [*STEPS, *MODELS]:
        for dtype_name in args.dtypes.split(","):
            if dtype_name in ONLY_DTYPES.get(name, (dtype_name,)):
                run_step(run, name, dtype_name)
    _print_table(run.results, run.timings)
    good = sum(bool(r.get("matched") and r.get("ran_on_kfuse")) for r in run.results)
    seconds = time.perf_counter() - run.start
    print(
        f"\nthunder_check: {good} of {len(run.results)} steps matched and ran on kfuse "
        f"({run.mode}, {seconds:.0f} s)"
    )
    return 0 if good == len(run.results) else 1


if __name__ == "__main__":
    sys.exit(main())
