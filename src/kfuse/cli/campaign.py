"""`kfuse campaign`: the command line of the property campaign.

    kfuse campaign [--device cuda|emulator] [--budget SECONDS | --examples N] [--kinds ...]
                   [--dtypes ...] [--max-rank R] [--max-ops N] [--seed S] [--shard I/N]
                   [--out DIR] [--workers N] ...
    kfuse campaign merge SUMMARY.json [SUMMARY.json ...] --out MERGED.json

Exit status: 0 when every example passed, 1 when some failed, 2 for a bad command line (one
line on stderr, never a traceback).
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kfuse.cli.parser import Parser, UsageError

DEFAULT_DTYPE_NAMES = ("Float", "Half", "BFloat16", "Double", "Int32", "Int", "Bool")
# The float8 and complex types only when asked for (--dtypes): they are new to the campaigns.
DTYPE_NAMES = (
    *DEFAULT_DTYPE_NAMES,
    "Float8_e4m3fn",
    "Float8_e5m2",
    "ComplexFloat",
    "ComplexDouble",
)


def _parser() -> Parser:
    from kfuse.testing import KINDS

    p = Parser(
        prog="kfuse campaign",
        description="Run random fusions through kfuse on every visible GPU (or the host "
        "emulator) and check each against the float64 reference; write a "
        "repro script for every failure and a JSON summary.",
        epilog="kfuse campaign merge A.json B.json --out M.json joins the summaries of "
        "shards run as separate invocations.",
    )
    p.add_argument(
        "--device",
        choices=("cuda", "emulator"),
        default=None,
        help="where kernels run (default: cuda when a GPU is visible, else emulator)",
    )
    limit = p.add_mutually_exclusive_group()
    limit.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="run this long (default 60 unless --examples is given): no example starts "
        "after it, and one still running a second later is ended uncounted (a failure "
        "found in time is still shrunk, for up to --shrink-seconds)",
    )
    limit.add_argument("--examples", type=int, metavar="N", help="run this many examples")
    p.add_argument(
        "--kinds",
        nargs="+",
        metavar="KIND",
        default=sorted(KINDS),
        help=f"fusion kinds to draw (default all: {' '.join(sorted(KINDS))})",
    )
    p.add_argument(
        "--dtypes",
        nargs="+",
        metavar="DTYPE",
        default=list(DEFAULT_DTYPE_NAMES),
        help=f"input dtypes to draw, of {' '.join(DTYPE_NAMES)} "
        f"(default: {' '.join(DEFAULT_DTYPE_NAMES)})",
    )
    p.add_argument("--max-rank", type=int, default=4, help="rank of the largest input (4)")
    p.add_argument("--max-ops", type=int, default=10, help="pointwise ops per fusion (10)")
    p.add_argument(
        "--favor-ops",
        nargs="+",
        metavar="OP",
        default=[],
        help="pointwise ops to draw twice as often as all the others together (default: none)",
    )
    p.add_argument(
        "--max-elements",
        type=int,
        default=None,
        help="elements per input at most (default 2^18 on a GPU, 2^12 emulated)",
    )
    p.add_argument(
        "--special-values",
        choices=("on", "off", "mix"),
        default="mix",
        help="NaN, inf and -0.0 in floating inputs: always, never, or drawn per "
        "example (default mix)",
    )
    p.add_argument(
        "--no-layouts",
        action="store_true",
        help="contiguous aligned inputs only (default: odd layouts too)",
    )
    p.add_argument(
        "--no-long-rows",
        action="store_true",
        help="no examples with one long axis (default: one in 8, up to 8 times "
        "--max-elements and at least 2^18 elements)",
    )
    _run_arguments(p)
    return p


def _run_arguments(p: Parser) -> None:
    """The options of how the campaign runs: seed and shard, output, workers, poison,
    shrinking, timeouts, replays (the drawing options are _parser's)."""
    p.add_argument("--seed", type=int, default=None, help="campaign seed (default: random)")
    p.add_argument(
        "--shard",
        default="0/1",
        metavar="I/N",
        help="this invocation is shard I of N of one campaign (same --seed on all)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for summary.json and repro scripts (default: a new folder "
        "kfuse-campaign-<time> here)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes in all (default: one per CPU, split over the "
        "GPUs; the CPUs on the emulator)",
    )
    p.add_argument(
        "--no-poison",
        action="store_true",
        help="do not fill new GPU buffers with kfuse's poison pattern (KFUSE_POISON)",
    )
    p.add_argument(
        "--shrink-seconds",
        type=float,
        default=30.0,
        help="Hypothesis shrinks each failure for at most this long (30; 0: not at all)",
    )
    p.add_argument(
        "--example-timeout",
        type=float,
        default=300.0,
        help="a worker stuck this long in one example is ended and reported (300)",
    )
    p.add_argument(
        "--replay-round",
        type=int,
        metavar="R",
        default=None,
        help="run round R of this seed and shard alone, in this process (with "
        "--examples N: the round's N from its failure record)",
    )


def main(argv: Sequence[str]) -> int:
    """Run `kfuse campaign` with `argv` (the words after `campaign`)."""
    argv = list(argv)
    try:
        if argv[:1] == ["merge"]:
            return _merge(argv[1:])
        if any(a in ("-h", "--help") for a in argv):
            _parser().print_help()
            return 0
        campaign, replay = _campaign(argv)
    except UsageError as exc:
        print(f"kfuse campaign: {exc}", file=sys.stderr)
        return 2
    if replay is not None:
        return _replay(campaign, replay)
    from kfuse.campaign.runner import run

    print(f"kfuse campaign: {_describe(campaign)}; results in {campaign.out}", flush=True)
    summary = run(campaign)
    print(f"summary: {campaign.out / 'summary.json'}")
    print(summary.time_line())
    print(summary.scheduler_line())
    print(summary.final_line())
    return 0 if summary.clean else 1


def _campaign(argv: list[str]) -> tuple[Any, int | None]:
    _require("hypothesis", "rich")
    args = _parser().parse_args(argv)
    from kfuse.campaign.property import ExampleSpace
    from kfuse.campaign.runner import Campaign
    from kfuse.dtypes import DataType

    device = args.device or ("cuda" if _gpu_count(quiet=True) > 0 else "emulator")
    if device == "cuda":
        _require("torch")
        count = _gpu_count(quiet=False)
        gpus = tuple(range(count))
    else:
        gpus = ()
    if args.budget is not None and args.budget <= 0:
        raise UsageError(f"--budget must be more than 0 seconds, got {args.budget:g}")
    if args.examples is not None and args.examples <= 0:
        raise UsageError(f"--examples must be at least 1, got {args.examples}")
    bad = [d for d in args.dtypes if d not in DTYPE_NAMES]
    if bad:
        raise UsageError(f"unknown dtype {bad[0]!r}; dtypes are {', '.join(DTYPE_NAMES)}")
    shard = _shard(args.shard)
    # Without torch, the emulator runs NumPy arrays (BFloat16 and float8 as ml_dtypes arrays).
    framework = "torch" if _has("torch") else "numpy"
    try:
        space = ExampleSpace(
            kinds=tuple(args.kinds),
            dtypes=tuple(DataType(d) for d in args.dtypes),
            max_rank=args.max_rank,
            max_ops=args.max_ops,
            favored_ops=tuple(args.favor_ops),
            max_elements=args.max_elements or (1 << 18 if gpus else 1 << 12),
            special_values=args.special_values,
            layouts=not args.no_layouts,
            long_rows=not args.no_long_rows,
            framework=framework,
            device="cuda" if gpus else "cpu",
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    out = _out_folder(args.out)
    workers = args.workers or _default_workers(len(gpus))
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    budget = args.budget if args.examples is None else None
    if budget is None and args.examples is None:
        budget = 60.0
    command = shlex.join(
        ["kfuse", "campaign", *argv, "--seed", str(seed)]
        if args.seed is None
        else ["kfuse", "campaign", *argv]
    )
    campaign = Campaign(
        space=space,
        out=out,
        gpus=gpus,
        workers=workers,
        budget=budget,
        examples=args.examples,
        seed=seed,
        shard=shard,
        poison=not args.no_poison,
        shrink_seconds=args.shrink_seconds,
        example_timeout=args.example_timeout,
        command=command,
        info=_info(device, gpus, argv),
    )
    return campaign, args.replay_round


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard must be I/N (e.g. 0/4), got {text!r}") from None
    if n < 1 or not 0 <= i < n:
        raise UsageError(f"--shard {text}: need 0 <= I < N")
    return i, n


def _out_folder(path: Path | None) -> Path:
    out = path or Path(f"kfuse-campaign-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
    return out.resolve()


def _default_workers(gpus: int) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = cpus or 1
    # One per CPU: a worker is busy on its CPU (NVRTC, drawing, the reference) nearly all the
    # time, and runs one thread (Campaign.environment). On one H200 with 16 CPUs, 16 such
    # workers drew 55 examples/s where 14 with torch's default thread pools drew 41.
    if gpus == 0:
        return cpus
    return max(gpus, (cpus // gpus) * gpus)


def _gpu_count(*, quiet: bool) -> int:
    try:
        from kfuse import _C

        count = _C.device_count()
    except Exception as exc:  # noqa: BLE001 - any driver failure means "no GPU here"
        if quiet:
            return 0
        raise UsageError(
            f"--device cuda: no usable CUDA driver ({type(exc).__name__}: {exc})"
        ) from None
    if count == 0 and not quiet:
        raise UsageError("--device cuda: the CUDA driver sees no GPU")
    return count


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _require(*modules: str) -> None:
    missing = [m for m in modules if not _has(m)]
    if missing:
        raise UsageError(
            f"needs {' and '.join(missing)}: pip install {' '.join(missing)} (or kfuse[campaign])"
        )


def _info(device: str, gpus: tuple[int, ...], argv: list[str]) -> dict[str, Any]:
    import kfuse
    from kfuse import switches

    info: dict[str, Any] = {
        "kfuse_version": kfuse.__version__,
        "kfuse_commit": os.environ.get("KFUSE_COMMIT") or None,
        "argv": argv,
        "python": sys.version.split()[0],
        # KFUSE_SWITCHES' paths, which the workers inherit with the environment
        "switches": switches.changed(),
    }
    if gpus:
        from kfuse import _C

        names = [_C.get_device_properties(g).name for g in gpus]
        info["device"] = f"{len(gpus)} x {names[0]}" if len(set(names)) == 1 else names
    else:
        info["device"] = "host emulator"
    return info


def _describe(campaign: Any) -> str:
    limit = (
        f"{campaign.budget:g} s" if campaign.budget is not None else f"{campaign.examples} examples"
    )
    where = f"{len(campaign.gpus)} GPU(s)" if campaign.gpus else "the host emulator"
    return (
        f"{limit} on {where} with {campaign.workers} workers, seed {campaign.seed}, "
        f"shard {campaign.shard[0]}/{campaign.shard[1]}"
    )


def _replay(campaign: Any, index: int) -> int:
    """Run one round in this process, as a worker would."""
    from kfuse.campaign import worker

    worker.start(None, _Counter(), list(campaign.gpus), campaign.environment(), campaign.out)
    # A round draws the same examples only with the same example count: the failure's
    # record ("round R of N examples") gives it.
    result = worker.run_round(campaign.round(index, campaign.examples or 200))
    print(f"round {index}: {result.examples} examples, {len(result.failures)} failures")
    for f in result.failures:
        print(f"  {f['outcome']}: {f['message'].splitlines()[0]}\n  repro: {f['repro']}")
    return 1 if result.failures else 0


class _Counter:
    """A stand-in for the pool's shared slot counter."""

    def __init__(self) -> None:
        self.value = 0

    def get_lock(self) -> Any:
        import contextlib

        return contextlib.nullcontext()


def _merge(argv: list[str]) -> int:
    from kfuse.campaign.summary import load, merge

    p = Parser(
        prog="kfuse campaign merge",
        description="Join the summary.json files of a campaign's shards.",
    )
    p.add_argument("summaries", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True, help="the merged JSON to write")
    args = p.parse_args(argv)
    loaded = []
    for path in args.summaries:
        try:
            loaded.append(load(path))
        except (OSError, ValueError, KeyError) as exc:
            raise UsageError(f"merge: {path} is not a campaign summary ({exc})") from None
    merged = merge(loaded)
    try:
        merged.write(args.out)
    except OSError as exc:
        raise UsageError(f"merge --out {args.out}: {exc.strerror or exc}") from None
    print(merged.scheduler_line())
    print(merged.final_line())
    return 0 if merged.clean else 1
