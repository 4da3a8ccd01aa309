"""A fixed corpus of fusions and the CUDA sources kfuse generates for them.

The corpus pins what the code generator writes, so that a change meant to leave kernels
alone (the staged-compiler refactor) can show that it did, and one meant to change them
shows exactly which. Each entry is a printed definition (``repr(fd)``), the layouts of its
inputs (dtype, shape, strides, alignment: the values do not reach the source) and the
SHA-256 of every kernel source the fusion compiles to, in compile order, with its segments'
schedulers. Sources are generated as the emulator target with the H200 profile's heuristics,
without compiling or running a kernel (the compile step is replaced by a recorder), so the
whole corpus takes seconds.

The entries: the benchmark workloads at their benchmark sizes, hand-written fusions for
each scheduler's paths (``SCHEDULER_CASES``), and fusions drawn once by
``kfuse.testing.fusions`` with a fixed seed. The drawn ones are stored as printed
definitions, not redrawn, so the corpus does not change with Hypothesis' version.

    python tests/source_corpus.py --check          # compare with tests/data/source_corpus.json
    python tests/source_corpus.py --update         # rewrite the hashes (after a deliberate change)
    python tests/source_corpus.py --dump DIR       # every entry's sources, to diff two commits
    python tests/source_corpus.py --draw 300       # replace the drawn entries (seed 20261202)
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

CORPUS_PATH = Path(__file__).resolve().parent / "data" / "source_corpus.json"
PROFILE = "h200"
DRAW_SEED = 20261202
SMALL = 1 << 20  # elements an input may span and still be run (segmented fusions)


# ---------------------------------------------------------------------------------------------
# Inputs: layouts only
# ---------------------------------------------------------------------------------------------


def describe_input(a: Any) -> dict[str, Any]:
    """The layout of a NumPy input (or a scalar) as the corpus stores it."""
    from kfuse.runtime.arrays import layout_of

    if not isinstance(a, np.ndarray):
        return {"scalar": a.item() if isinstance(a, np.generic) else a}
    lay = layout_of(a, "input")
    return {
        "dtype": lay.dtype.value,
        "shape": list(lay.shape),
        "strides": list(lay.strides),
        "alignment": lay.data_ptr % 16,
    }


def build_input(entry: dict[str, Any]) -> Any:
    """A NumPy array with the described layout. Its memory holds a few small values repeated
    (the sources do not depend on them). A benchmark-sized input is a view of a buffer of 16
    elements with the full strides: kfuse reads only its layout, since the corpus compiles a
    fusion that one scheduler takes without running it (sources_of)."""
    from kfuse.dtypes import DataType, to_numpy_dtype
    from kfuse.testing.input_arrays import aligned_start

    if "scalar" in entry:
        return entry["scalar"]
    dtype = np.dtype(to_numpy_dtype(DataType(entry["dtype"])))
    shape, strides = tuple(entry["shape"]), tuple(entry["strides"])
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
    n = (span if span <= SMALL else 0) + 16
    buf = (np.arange(n) % 7).astype(np.float64).astype(dtype)
    start = aligned_start(entry["alignment"], buf.ctypes.data, buf.itemsize)
    return np.lib.stride_tricks.as_strided(
        buf[start:], shape, [s * buf.itemsize for s in strides], writeable=False
    )


# ---------------------------------------------------------------------------------------------
# Sources, with the compile step recorded instead of run
# ---------------------------------------------------------------------------------------------


class _NoKernel:
    """What the recorder hands back for a kernel: launching it does nothing (a segmented
    fusion's later segments are compiled when the earlier ones have 'run')."""

    def launch(self, *args: Any) -> None:
        return None


@contextlib.contextmanager
def recorded_sources(into: list[tuple[str, str]]) -> Iterator[None]:
    """Within: every kernel kfuse would compile is appended to `into` as (name, source)."""
    from kfuse.engine import compiler

    real = compiler.KernelCompiler.compile

    def record(self: Any, source: str, name: str, info: Any) -> Any:
        into.append((name, source))
        return _NoKernel()

    compiler.KernelCompiler.compile = record  # type: ignore[method-assign]
    try:
        yield
    finally:
        compiler.KernelCompiler.compile = real  # type: ignore[method-assign]


def definition_of(text: str) -> Any:
    """The FusionDefinition a printed definition (``repr(fd)``) describes."""
    from kfuse import DataType, FusionDefinition

    namespace: dict[str, Any] = {"DataType": DataType, "FusionDefinition": FusionDefinition}
    exec(text, namespace)  # noqa: S102 - the corpus' own printed definitions
    with FusionDefinition() as fd:
        namespace["kfuse_fusion"](fd)
    return fd


def sources_of(entry: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    """(the segments' schedulers, the kernels' (name, source) in compile order) of an entry.

    A fusion that one scheduler takes is scheduled as for a CUDA device of the profile (its
    inputs' layouts described as NumPy views; nothing runs), so the sources are those an
    H200 gets, thread-block clusters included. A segmented fusion runs on the emulator with
    the profile's heuristics (clusters included, as the emulator runs them), its kernels
    replaced by no-ops."""
    import dataclasses

    from kfuse.engine import compiler
    from kfuse.ir.canonicalize import canonical_fusion
    from kfuse.runtime.info import CUDA, build_runtime_info

    fd = definition_of(entry["definition"])
    kernels: list[tuple[str, str]] = []
    with _profile(PROFILE), recorded_sources(kernels):
        inputs = [build_input(i) for i in entry["inputs"]]
        fusion = canonical_fusion(fd.fusion)  # what fd.execute schedules
        info = build_runtime_info(fusion, inputs, device=None)
        as_gpu = dataclasses.replace(info, backend=CUDA)
        scheduler, _ = compiler.choose_scheduler(fusion, as_gpu)
        if scheduler is not None:
            compiler.compile_fusion(fusion, as_gpu, None, segment=False)
            return [scheduler.scheduler_type.value], kernels
        spans = [a.size for a in inputs if isinstance(a, np.ndarray)]
        if max(spans, default=0) > SMALL:
            raise ValueError(f"{entry['name']}: a segmented fusion's inputs must be small")
        segments = fd.segments(inputs)
        fd.execute(inputs)  # later segments compile as the run reaches them
    return [s.scheduler.value for s in segments], kernels


def digest(schedulers: list[str], kernels: list[tuple[str, str]]) -> str:
    """The hash of the segments and of each kernel's own code: the runtime header every
    source starts with is left out (it is a file of its own; a change to it would otherwise
    change every entry and hide which kernels a change of the generator touched)."""
    from kfuse.runtime.runtime_header import runtime_header

    header = runtime_header()
    h = hashlib.sha256()
    h.update(("segments: " + ", ".join(schedulers) + "\n").encode())
    for name, source in kernels:
        own = source[len(header) :] if source.startswith(header) else source
        h.update(f"// kernel {name}\n{own}\n".encode())
    return h.hexdigest()


def _select_profile(name: str) -> None:
    """Dumps of another profile compare a change's kernels on the other GPUs too."""
    global PROFILE
    PROFILE = name


@contextlib.contextmanager
def _profile(name: str) -> Iterator[None]:
    """The emulator's heuristics take the device profile `name` within (knobs are read from
    the environment at each call)."""
    old = os.environ.get("KFUSE_EMULATOR_PROFILE")
    os.environ["KFUSE_EMULATOR_PROFILE"] = name
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("KFUSE_EMULATOR_PROFILE", None)
        else:
            os.environ["KFUSE_EMULATOR_PROFILE"] = old


# ---------------------------------------------------------------------------------------------
# The entries
# ---------------------------------------------------------------------------------------------


def _contiguous(dtype: str, *shape: int) -> dict[str, Any]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= max(n, 1)
    return {"dtype": dtype, "shape": list(shape), "strides": strides, "alignment": 0}


def _workload_entries() -> list[dict[str, Any]]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from workloads import WORKLOADS

    bf16, f32 = "BFloat16", "Float"
    shapes = {
        "W1": [_contiguous(bf16, 16384, 8192), _contiguous(bf16, 8192)],
        "W1f": [_contiguous(f32, 16384, 8192), _contiguous(f32, 8192)],
        "W2": [_contiguous(f32, 16384, 16384)],
        "W3": [_contiguous(f32, 16384, 16384)],
        "W4": [_contiguous(bf16, 32768, 4096)],
        "W5": [_contiguous(bf16, 32768, 4096), _contiguous(bf16, 4096)],
        "W6": [_contiguous(bf16, 32768, 4096), _contiguous(bf16, 4096), _contiguous(bf16, 4096)],
    }
    return [
        {"name": f"workload {w.id}", "definition": repr(w.definition()), "inputs": shapes[w.id]}
        for w in WORKLOADS
    ]


def _case(name: str, build: Callable[[Any], None], inputs: list[dict[str, Any]]) -> dict:
    from kfuse import FusionDefinition

    with FusionDefinition() as fd:
        build(fd)
    return {"name": name, "definition": repr(fd), "inputs": inputs}


def _scheduler_entries() -> list[dict[str, Any]]:
    """Each scheduler's paths: vector and scalar loads, broadcasts, strides, misalignment,
    inner and outer reductions, grid splits, persistent rows short and long, segments."""
    from kfuse import DataType

    f32, bf16, i32 = "Float", "BFloat16", "Int32"
    cases = []

    def pointwise(fd: Any) -> None:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        y = fd.ops.add(x, fd.ops.broadcast(b, is_broadcast_dim=[True, False]))
        fd.add_output(fd.ops.mul(fd.ops.exp(y), 2.0))

    for label, x in [
        ("contiguous", _contiguous(f32, 1000, 1024)),
        ("misaligned", {**_contiguous(f32, 1000, 1024), "alignment": 4}),
        ("transposed", {"dtype": f32, "shape": [1024, 1000], "strides": [1, 1024], "alignment": 0}),
        ("expanded", {"dtype": f32, "shape": [1000, 1024], "strides": [0, 1], "alignment": 0}),
        ("odd rows", _contiguous(f32, 999, 1023)),
        ("large", _contiguous(f32, 65536, 32768)),
    ]:
        cases.append(_case(f"pointwise {label}", pointwise, [x, _contiguous(f32, x["shape"][1])]))

    def reduction(op: str, dim: int, dtype: Any) -> Callable[[Any], None]:
        def build(fd: Any) -> None:
            x = fd.define_tensor(shape=[-1, -1], dtype=dtype)
            fd.add_output(getattr(fd.ops, op)(fd.ops.cast(x, DataType.Float), dims=[dim]))

        return build

    for op, dim, shape in [
        ("sum", 1, (4096, 4096)),
        ("sum", 1, (64, 1 << 20)),
        ("sum", 0, (4096, 4096)),
        ("sum", 0, (1 << 20, 64)),
        ("max", 1, (1000, 1000)),
        ("min", 0, (333, 777)),
        ("prod", 1, (7, 100000)),
    ]:
        cases.append(
            _case(
                f"reduction {op} dim {dim} {list(shape)}",
                reduction(op, dim, DataType.Float),
                [_contiguous(f32, *shape)],
            )
        )
    cases.append(
        _case(
            "reduction int32 sum", reduction("sum", 1, DataType.Int32), [_contiguous(i32, 64, 5000)]
        )
    )

    def welford(dims: list[int], rank: int) -> Callable[[Any], None]:
        def build(fd: Any) -> None:
            x = fd.define_tensor(shape=[-1] * rank, dtype=DataType.BFloat16)
            mean, m2, _ = fd.ops.welford(fd.ops.cast(x, DataType.Float), dims=dims)
            fd.add_output(mean)
            fd.add_output(m2)

        return build

    cases.append(_case("welford inner", welford([1], 2), [_contiguous(bf16, 2048, 8192)]))
    cases.append(_case("welford outer", welford([0], 2), [_contiguous(bf16, 8192, 2048)]))
    cases.append(
        _case("welford channels last", welford([0, 1, 2], 4), [_contiguous(bf16, 32, 56, 56, 256)])
    )

    def layer_norm(fd: Any) -> None:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        mean, m2, _ = fd.ops.welford(xf, dims=[1])
        n = fd.ops.cast(fd.ops.size(xf, dim=1), DataType.Float)
        inv = fd.ops.rsqrt(fd.ops.add(fd.ops.div(m2, n), 1e-5))
        y = fd.ops.mul(
            fd.ops.sub(xf, fd.ops.broadcast(mean, is_broadcast_dim=[False, True])),
            fd.ops.broadcast(inv, is_broadcast_dim=[False, True]),
        )
        y = fd.ops.mul(y, fd.ops.broadcast(fd.ops.cast(w, DataType.Float), [True, False]))
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))

    for n in [64, 1000, 4096, 16384, 65536, 262144]:
        rows = max(1, (1 << 27) // n)
        cases.append(
            _case(
                f"layer norm rows of {n}",
                layer_norm,
                [_contiguous(bf16, rows, n), _contiguous(bf16, n)],
            )
        )

    def softmax(fd: Any) -> None:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        m = fd.ops.broadcast(fd.ops.max(x, dims=[1]), is_broadcast_dim=[False, True])
        e = fd.ops.exp(fd.ops.sub(x, m))
        s = fd.ops.broadcast(fd.ops.sum(e, dims=[1]), is_broadcast_dim=[False, True])
        fd.add_output(fd.ops.div(e, s))

    for shape in [(4096, 1024), (100, 33333), (1 << 20, 8)]:
        cases.append(_case(f"softmax {list(shape)}", softmax, [_contiguous(f32, *shape)]))

    def segmented(fd: Any) -> None:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        s0 = fd.ops.sum(x, dims=[0])
        s1 = fd.ops.sum(x, dims=[1])
        fd.add_output(fd.ops.add(x, fd.ops.broadcast(s0, is_broadcast_dim=[True, False])))
        fd.add_output(s1)

    cases.append(_case("segmented sums over both axes", segmented, [_contiguous(f32, 300, 500)]))
    return cases + _norm_entries()


def _norm_entries() -> list[dict[str, Any]]:
    """The model suite's norm backwards (inner_outer_persistent) and outer norms
    (outer_persistent) at sizes of its sweep."""
    from norm_fusions import layer_norm_backward, rms_norm_backward
    from outer_norm_fusions import batch_norm_nhwc, softmax0

    bf16, f32 = "BFloat16", "Float"

    def entry(name: str, fd: Any, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"name": name, "definition": repr(fd), "inputs": inputs}

    cases = []
    for n, h in [(16384, 4096), (32768, 1024)]:
        big, rows = _contiguous(bf16, n, h), _contiguous(f32, n, 1)
        cases.append(
            entry(
                f"rms norm backward {n}x{h}",
                rms_norm_backward(),
                [big, rows, big, _contiguous(bf16, h)],
            )
        )
        cases.append(
            entry(
                f"layer norm backward {n}x{h}",
                layer_norm_backward(),
                [big, big, _contiguous(f32, n), rows, _contiguous(bf16, h)],
            )
        )
    cases.append(entry("softmax over axis 0 2048x512", softmax0(), [_contiguous(f32, 2048, 512)]))
    channels = _contiguous(f32, 256)
    cases.append(
        entry(
            "batch norm channels-last 4x16x16x256",
            batch_norm_nhwc(),
            [_contiguous(f32, 4, 16, 16, 256), channels, channels],
        )
    )
    return cases


def draw_entries(count: int, seed: int = DRAW_SEED) -> list[dict[str, Any]]:
    """`count` fusions drawn by kfuse.testing's strategies (every kind, rank up to 4, up to
    10 ops, odd layouts) that kfuse compiles to kernels no earlier draw gave, with their NumPy
    inputs' layouts."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    from kfuse.errors import KfuseError
    from kfuse.testing import KINDS, fusions, inputs_for

    drawn: list[dict[str, Any]] = []
    seen: set[str] = set()

    @hypothesis_seed(seed)
    @settings(
        max_examples=count * 5,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def draw(data: Any) -> None:
        kind = data.draw(st.sampled_from(sorted(KINDS)))
        fd = data.draw(fusions(kinds={kind}, max_rank=4, max_ops=10))
        inputs = data.draw(inputs_for(fd, framework="numpy", max_elements=1 << 14))
        entry = {
            "name": f"drawn {len(drawn)} ({kind})",
            "definition": repr(fd),
            "inputs": [describe_input(a) for a in inputs],
        }
        try:
            schedulers, kernels = sources_of(entry)
        except KfuseError:
            return
        key = digest(schedulers, kernels)
        if kernels and key not in seen:  # Hypothesis repeats its simplest draws
            seen.add(key)
            drawn.append(entry)

    draw()
    for k, entry in enumerate(drawn[:count]):
        entry["name"] = f"drawn {k} ({entry['name'].split('(')[1]}"
    return drawn[:count]


def load() -> list[dict[str, Any]]:
    return json.loads(CORPUS_PATH.read_text())["entries"]


def save(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        schedulers, kernels = sources_of(entry)
        entry["segments"] = schedulers
        entry["kernels"] = len(kernels)
        entry["sha256"] = digest(schedulers, kernels)
    CORPUS_PATH.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"profile": PROFILE, "entries": entries}, indent=1) + "\n"
    CORPUS_PATH.write_text(text)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="compare with the stored hashes")
    action.add_argument("--update", action="store_true", help="store the current hashes")
    action.add_argument("--dump", metavar="DIR", help="write every entry's sources under DIR")
    action.add_argument("--draw", type=int, metavar="N", help="redraw N drawn entries, store")
    parser.add_argument(
        "--profile",
        default=PROFILE,
        help=f"the device profile whose sources --dump writes (default {PROFILE}; the stored "
        "hashes are that profile's)",
    )
    args = parser.parse_args(argv)
    if args.profile != PROFILE and not args.dump:
        parser.error("--profile other than the stored one goes with --dump")
    _select_profile(args.profile)
    if args.draw is not None:
        fixed = _workload_entries() + _scheduler_entries()
        save(fixed + draw_entries(args.draw))
        print(f"{CORPUS_PATH}: {len(fixed)} fixed and {args.draw} drawn entries")
        return 0
    entries = load()
    if args.update:
        drawn = [e for e in entries if e["name"].startswith("drawn ")]
        save(_workload_entries() + _scheduler_entries() + drawn)
        print(f"{CORPUS_PATH}: hashes of {len(entries)} entries rewritten")
        return 0
    changed = 0
    for entry in entries:
        try:
            schedulers, kernels = sources_of(entry)
        except ValueError as exc:  # segmented on another profile, and too big to run
            if not args.dump:
                raise
            schedulers, kernels = [f"not dumped: {exc}"], []
        if args.dump:
            folder = Path(args.dump)
            folder.mkdir(parents=True, exist_ok=True)
            name = entry["name"].replace(" ", "_").replace("/", "_")
            text = "".join(f"// kernel {n}\n{s}\n" for n, s in kernels)
            (folder / f"{name}.cu").write_text(f"// segments: {', '.join(schedulers)}\n{text}")
        elif digest(schedulers, kernels) != entry["sha256"]:
            changed += 1
            print(f"changed: {entry['name']}")
    if args.check:
        print(f"{changed} of {len(entries)} entries generate different sources")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
