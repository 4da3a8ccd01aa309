"""The model-fusion suite (benchmarks/models): every ported nvFuser fusion is right on the host
emulator at a tiny size and on a GPU at a mid size, its torch peer computes the same outputs,
and the runner, the tables and the charts work without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpu_support import requires_gpu
from kfuse.engine.program import KernelProgram

torch = pytest.importorskip("torch")

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from models import (  # noqa: E402
    chart,
    dropout_rng,
    layouts,
    mask_traffic,
    measure,
    pointwise,
    registry,
    resize,
    table,
    thunder_regions,
)
from models.case import DTYPES, bytes_moved, first_call  # noqa: E402
from models.run import load_suite, plan, progress  # noqa: E402

SUITE = load_suite()
CASES = {c.name: c for c in registry.CASES}


def _inputs(case, dtype: str, size, device: str) -> list:
    torch.manual_seed(0)
    return case.make_inputs(torch, size, getattr(torch, dtype), device)


def _check(peer: str, outputs, references) -> None:
    result = measure.check_outputs(torch, peer, outputs, references, SUITE.check)
    assert result["check"] == "ok", result["check"]


def _kfuse(case, dtype: str, inputs: list, launches: list | None = None) -> list:
    """kfuse's outputs (a case that updates inputs: the updated copies, as the suite checks);
    the number of kernels the call launched is appended to `launches` where given."""
    fd, _ = measure.definition(case, dtype)
    _, outputs = first_call(case, fd.execute, inputs, as_list=True)
    if launches is not None:
        launches.append(len(fd.last_program().launches))
    _, expected = first_call(case, case.torch_fn, inputs)
    # The torch peer's outputs are what bytes_moved counts: they must be kfuse's in kind.
    assert [(o.dtype, tuple(o.shape)) for o in outputs] == [
        (o.dtype, tuple(o.shape)) for o in expected
    ]
    return list(outputs)


def _check_torch_peer(case, inputs: list) -> None:
    """The torch peer against what the suite checks it against (Case.reference_for)."""
    references = case.reference(*inputs)
    _, outputs = first_call(case, case.torch_fn, inputs)
    _check("torch", outputs, case.reference_for("torch", inputs, outputs, references))


def test_registry() -> None:
    assert len(CASES) == len(registry.CASES), "case names must be unique"
    for case in registry.CASES:
        assert case.source.count("::") == 1 and case.source.split("::")[0].endswith(".py")
        assert case.sizes and case.quick_sizes
        assert set(case.quick_sizes) <= set(case.sizes)
    # A family by name (no other case names it; "softmax" also names causal_softmax_fwd).
    assert registry.select("groupnorm") == [c for c in registry.CASES if c.family == "groupnorm"]
    assert [c.name for c in registry.select("^rmsnorm_bwd$")] == ["rmsnorm_bwd"]
    # The pointwise families, one per nvFuser file, run after the transposes and before
    # attention.
    families = registry.FAMILIES
    for case in pointwise.CASES:
        assert case.source.split("::")[0] == f"test_{case.family}.py"
        assert families.index("transpose") < families.index(case.family)
        assert families.index(case.family) < families.index("attention")


def test_the_tools_name_a_case_and_size_as_case_colon_size() -> None:
    rms = CASES["rmsnorm_fwd"]
    assert registry.case_and_shape("rmsnorm_fwd:8192x8192") == (rms, (8192, 8192))
    assert registry.case_and_shape("rmsnorm_fwd") == (rms, rms.quick_sizes[0])
    with pytest.raises(ValueError, match="no model-suite case 'rmsnorm'"):
        registry.case_and_shape("rmsnorm:8192x8192")
    with pytest.raises(ValueError, match="integers joined by 'x'"):
        registry.case_and_shape("rmsnorm_fwd:8192*8192")


ONE_KERNEL_CASES = [
    *resize.PROBE_CASES,
    *layouts.PROBE_CASES,
    *mask_traffic.PROBE_CASES,
    *(CASES[name] for name in ("embedding_fwd", "adam_step", "causal_softmax_fwd")),
]


@pytest.mark.parametrize("case", ONE_KERNEL_CASES, ids=lambda c: c.name)
def test_single_kernel_cases_match_the_reference(case) -> None:
    """The tools' probe cases (slices and a cat around RoPE, a channels-last activation's
    scale, bias and ReLU, a dropout's mask read, written and drawn), which the suite never
    runs, and
    the suite's embedding and Adam step written in place are right on the emulator, the
    torch peer's too; each is one kernel (reading views of x, and for the cat writing both
    halves of its output; the Adam step reading four arrays and writing three of them in
    place)."""
    assert (case.name in CASES) == (case not in registry.PROBE_CASES)
    assert registry.case_and_shape(case.name)[0] is case
    dtype = case.dtypes[0]
    inputs = _inputs(case, dtype, case.test_size, "cpu")
    before = [t.clone() for t in inputs]
    references = case.reference(*inputs)
    fd, _ = measure.definition(case, dtype)
    _, outputs = first_call(case, fd.execute, inputs, as_list=True)
    _check("kfuse", list(outputs), references)
    _, expected = first_call(case, case.torch_fn, inputs)
    # A torch peer that draws its own random numbers is checked against its own mask's.
    _check("torch", list(expected), case.reference_for("torch", inputs, expected, references))
    # The torch peer's outputs are what bytes_moved counts: they must be kfuse's in kind.
    assert [(o.dtype, tuple(o.shape)) for o in outputs] == [
        (o.dtype, tuple(o.shape)) for o in expected
    ]
    # The peers ran on copies where the case updates its inputs: the originals are intact.
    assert all(torch.equal(a, b) for a, b in zip(inputs, before))
    program = fd.last_program()
    assert isinstance(program, KernelProgram) and len(program.launches) == 1
    if case.updates:
        assert program.in_place == tuple(
            (k, position) for k, position in enumerate(case.updates)
        ), "every update stored by the kernel itself"


@pytest.mark.parametrize("case", thunder_regions.PROBE_CASES, ids=lambda c: c.name)
def test_thunder_loss_regions_are_generated_kernels_alone(case) -> None:
    """The loss regions Thunder hands kfuse (probe cases) are right on the emulator, the
    torch peer's too, and run as generated kernels alone in one program (no library
    segment: a framework call on every execute keeps a region off the host fast path, and
    made the whole fp32 logits or a padded copy of them to read one element a row)."""
    from kfuse.engine.program import SegmentKernelsProgram

    assert registry.case_and_shape(case.name)[0] is case
    inputs = _inputs(case, case.dtypes[0], case.test_size, "cpu")
    references = case.reference(*inputs)
    fd, _ = measure.definition(case, case.dtypes[0])
    _, outputs = first_call(case, fd.execute, inputs, as_list=True)
    _check("kfuse", list(outputs), references)
    _, expected = first_call(case, case.torch_fn, inputs)
    # A torch peer that draws its own random numbers is checked against its own mask's.
    _check("torch", list(expected), case.reference_for("torch", inputs, expected, references))
    assert [(o.dtype, tuple(o.shape)) for o in outputs] == [
        (o.dtype, tuple(o.shape)) for o in expected
    ]
    assert isinstance(fd.last_program(), SegmentKernelsProgram)


RANDOM_CASES = [*dropout_rng.NORM_CASES, *dropout_rng.ATTENTION_CASES]


@pytest.mark.parametrize("case", RANDOM_CASES, ids=lambda c: c.name)
def test_dropouts_draw_the_references_mask(case) -> None:
    """The suite's dropouts that draw their mask: kfuse's outputs are the reference's (the
    same numbers: NumPy's Philox), keeping about 1 - p; the torch peer's mask is its own,
    and its outputs are the reference's for that mask (what the suite checks it against),
    not for kfuse's; with the kernel's mask as the input of the suite's mask-as-input twin,
    that twin gives the reference's outputs."""
    assert case in registry.CASES and case.peer_reference is not None
    twin = CASES[case.name.removesuffix("_rng")]
    assert registry.CASES.index(case) > registry.CASES.index(twin)
    inputs = _inputs(case, "bfloat16", case.test_size, "cpu")
    references = case.reference(*inputs)
    launches: list[int] = []
    got = _kfuse(case, "bfloat16", inputs, launches)
    _check("kfuse", got, references)
    position = dropout_rng.MASK_OUTPUT[case.name]
    mask = got[position]
    assert mask.dtype == torch.bool and mask.shape == references[position].shape
    assert bool((mask == references[position]).all())
    assert 0.6 < float(mask.float().mean()) < 0.95
    peer = list(case.torch_fn(*inputs))
    assert not torch.equal(peer[position], mask), "torch draws its own mask"
    _check("torch", peer, case.peer_reference(inputs, peer))
    wrong = measure.check_outputs(torch, "torch", peer, references, SUITE.check)
    assert wrong["check"] != "ok", "checked against kfuse's mask, torch's outputs mismatch"
    # Every twin takes the mask as its input 2 and returns the outputs but the mask.
    twin_inputs = [*inputs[:2], mask, *inputs[2:]]
    expected = [r for k, r in enumerate(references) if k != position]
    _check("kfuse", _kfuse(twin, "bfloat16", twin_inputs, launches), expected)
    # Drawing the mask in the fusion costs no kernel (no pass over memory) of its own.
    assert launches[0] == launches[1], (
        f"{launches[0]} kernels drawing the mask, {launches[1]} reading it"
    )


@pytest.mark.parametrize("name", list(CASES))
def test_kfuse_matches_reference_on_emulator(name: str) -> None:
    case = CASES[name]
    dtype = case.dtypes[0]
    inputs = _inputs(case, dtype, case.test_size, "cpu")
    _check("kfuse", _kfuse(case, dtype, inputs), case.reference(*inputs))


OUTER_NORMS = [
    "softmax_fwd_dim0",
    "softmax_bwd_dim0",
    "batchnorm_fwd_nhwc",
    "batchnorm_bwd_nhwc",
    "instancenorm_fwd_nhwc",
]


@pytest.mark.parametrize("name", OUTER_NORMS)
def test_outer_norms_are_one_outer_persistent_kernel(name: str) -> None:
    """The outer normalizations (reduced axes outer, channels innermost) at the test size:
    one segment, which outer_persistent takes (its backward's dweight/dbias of instance
    norm reduce over other axes, so instancenorm_bwd_nhwc keeps a second segment)."""
    case = CASES[name]
    fd, _ = measure.definition(case, "bfloat16")
    segments = fd.segments(_inputs(case, "bfloat16", case.test_size, "cpu"))
    assert [s.scheduler.value for s in segments] == ["outer_persistent"]


@pytest.mark.parametrize(
    ("name", "scheduler"),
    [
        ("transpose_01", "pointwise"),
        ("transpose_02", "transpose"),
        ("transpose_12", "transpose"),
        ("bcast_add_strided_dim0", "transpose"),
    ],
)
def test_transposes_moving_the_innermost_axis_are_one_transpose_kernel(
    name: str, scheduler: str
) -> None:
    """Swapping the two outer axes keeps the innermost one: a pointwise kernel; swapping it
    with another is the transpose scheduler's, at the test size as on the GPU."""
    case = CASES[name]
    fd, _ = measure.definition(case, "bfloat16")
    segments = fd.segments(_inputs(case, "bfloat16", case.test_size, "cpu"))
    assert [s.scheduler.value for s in segments] == [scheduler]


def _uninitialised(case, dtype: str, shape) -> list:
    """The case's inputs at `shape`, allocated but not filled (fd.segments plans, it does not
    run): the test size's inputs with each test-size extent replaced by `shape`'s."""
    extent = dict(zip(case.test_size, shape, strict=True))
    assert len(extent) == len(case.test_size), "test-size extents must differ"
    small = _inputs(case, dtype, case.test_size, "cpu")
    return [torch.empty([extent[n] for n in t.shape], dtype=t.dtype) for t in small]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", [c.name for c in pointwise.CASES])
def test_pointwise_fusions_are_one_kernel(name: str, dtype: str) -> None:
    """Each pointwise fusion is one pointwise kernel, and gelu_bwd_reduction (the same GELU
    backward summed over either axis) one reduction kernel, at the test size and at every
    benchmark size (planned, not run)."""
    case = CASES[name]
    expected = ["reduction" if case.family == "gelu_bwd_reduction" else "pointwise"]
    fd, _ = measure.definition(case, dtype)
    assert _schedulers(fd, _inputs(case, dtype, case.test_size, "cpu")) == expected
    for shape in case.sizes:
        assert _schedulers(fd, _uninitialised(case, dtype, shape)) == expected, shape


@pytest.mark.slow
# Every case again in float32 (a kernel each): CI's extended step; the quick run checks every
# case in its own dtype (test_kfuse_matches_reference_on_emulator).
@pytest.mark.extended
@pytest.mark.parametrize("name", list(CASES))
def test_kfuse_matches_reference_on_emulator_fp32(name: str) -> None:
    case = CASES[name]
    inputs = _inputs(case, "float32", case.test_size, "cpu")
    _check("kfuse", _kfuse(case, "float32", inputs), case.reference(*inputs))


@pytest.mark.slow  # every size of every case, two dtypes, three device profiles
@pytest.mark.parametrize(
    "profile",
    # The H200's and A100's walks (6 s each) in CI's extended step.
    [
        "h100",
        pytest.param("h200", marks=pytest.mark.extended),
        pytest.param("a100", marks=pytest.mark.extended),
    ],
)
def test_every_size_gets_params_its_schedulers_accept(profile: str) -> None:
    """Issue 23's property over the model suite: at every size of every case's sweep (the
    inputs' real layouts, from meta tensors), the automatic heuristics give each segment
    params its scheduler turns into kernels (short rows split, short runs reduced last,
    softmax statistics folded, held rows in registers or shared memory: each validated)."""
    from planning import gpu_info, kernels_for

    for case in registry.CASES:
        if case.skip:
            continue
        for dtype in ("bfloat16", "float32"):
            fd, _ = measure.definition(case, dtype)
            for size in case.sizes:
                inputs = case.make_inputs(torch, size, getattr(torch, dtype), "meta")
                info = gpu_info(
                    fd,
                    [tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in inputs],
                    profile,
                    [tuple(t.stride()) if isinstance(t, torch.Tensor) else None for t in inputs],
                )
                kernels_for(fd.fusion, info)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(CASES))
def test_torch_peer_matches_reference(name: str, dtype: str) -> None:
    case = CASES[name]
    _check_torch_peer(case, _inputs(case, dtype, case.test_size, "cpu"))


def test_check_catches_a_wrong_output() -> None:
    case = CASES["rmsnorm_fwd"]
    inputs = _inputs(case, "bfloat16", case.test_size, "cpu")
    y, rms = case.torch_fn(*inputs)
    wrong = measure.check_outputs(
        torch, "torch", [y, rms * 1.01], case.reference(*inputs), SUITE.check
    )
    assert wrong["check"].startswith("output 1: MISMATCH")
    short = measure.check_outputs(torch, "torch", [y], case.reference(*inputs), SUITE.check)
    assert "1 outputs, expected 2" in short["check"]


def test_groupnorm_is_spelled_as_nvfuser_spells_it() -> None:
    """Group size C / G by fd.ops.div of Int scalars (an Int, as in nvFuser): the case's own
    definition builds, with no workaround."""
    case = CASES["groupnorm_fwd_g32"]
    assert case.workaround is None
    fd, note = measure.definition(case, "bfloat16")
    assert note == "" and "fd.ops.div(S" in repr(fd)
    reshape_extents = [
        v for e in fd.fusion.exprs if type(e).__name__ == "ReshapeOp" for v in e.shape
    ]
    assert reshape_extents and all(v.dtype.is_integral for v in reshape_extents)


GROUPNORMS = [name for name in CASES if name.startswith("groupnorm_fwd")]


def _schedulers(fd, inputs: list) -> list[str]:
    return [s.scheduler.value for s in fd.segments(inputs)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", GROUPNORMS)
def test_groupnorm_is_one_persistent_kernel(name: str, dtype: str) -> None:
    """The reshapes fold into the kernel's operands (views of contiguous inputs and
    outputs) and the per-channel weight is read along its part of the row: one
    inner_persistent kernel, no copies. At the benchmark sizes too (sources generated, not
    run) where one block holds a row, which is all the emulator runs: bf16 with G > 1 (G = 1
    and float32 G = 8 rows need a cluster of blocks: test_groupnorm_is_one_program_on_the_gpu)."""
    case = CASES[name]
    fd, _ = measure.definition(case, dtype)
    assert _schedulers(fd, _inputs(case, dtype, case.test_size, "cpu")) == ["inner_persistent"]
    if name == "groupnorm_fwd_g1" or dtype != "bfloat16":
        return
    kind = getattr(torch, dtype)
    for shape in case.sizes:
        inputs = [torch.empty(s, dtype=kind) for s in (shape, shape[1:2], shape[1:2])]
        assert _schedulers(fd, inputs) == ["inner_persistent"], shape


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", GROUPNORMS)
def test_groupnorm_is_one_program_on_the_gpu(name: str, dtype: str) -> None:
    """On an H200 the benchmark sizes of every group count run as one inner_persistent
    kernel, but for rows a cluster would hold only in part (G = 1, up to 802816 elements):
    those run as a Welford reduction and a pointwise normalization, one program with the
    reshapes folded (no expr_eval copy); right at a mid size and at the quick size."""
    case = CASES[name]
    fd, _ = measure.definition(case, dtype)
    for shape in case.sizes:
        inputs = _inputs(case, dtype, shape, "cuda")
        schedulers = _schedulers(fd, inputs)
        if name == "groupnorm_fwd_g1" and schedulers != ["inner_persistent"]:
            assert schedulers == ["reduction", "pointwise"], shape
        else:
            assert schedulers == ["inner_persistent"], shape
    for shape in (case.gpu_test_size, case.quick_sizes[0]):
        inputs = _inputs(case, dtype, shape, "cuda")
        _check("kfuse", fd.execute(inputs), case.reference(*inputs))
        assert isinstance(fd.last_program(), KernelProgram), shape


def test_workaround_is_used_and_said() -> None:
    """A case kfuse cannot build as nvFuser writes it runs its workaround, and says so."""
    import dataclasses

    from kfuse.errors import DefinitionError

    case = CASES["rmsnorm_fwd"]

    def unbuildable(dtype: object) -> object:
        raise DefinitionError("no such op")

    broken = dataclasses.replace(case, define=unbuildable, workaround=(case.define, "spelled so"))
    fd, note = measure.definition(broken, "bfloat16")
    assert (
        fd is not None and note == "workaround: spelled so (nvFuser's spelling fails: no such op)"
    )


def test_bytes_moved() -> None:
    case = CASES["rmsnorm_bwd"]
    m, n = 8, 16
    inputs = _inputs(case, "bfloat16", (m, n), "cpu")
    # x, grad (bf16), rms (float [m, 1]), weight (bf16) in; dx, dweight (bf16) out.
    expected = 2 * m * n * 2 + m * 4 + n * 2 + m * n * 2 + n * 2
    assert bytes_moved(inputs, case.torch_fn(*inputs)) == expected


class _HostSuite:
    """benchmarks/run.py's check with a wall-clock time_ms: measure() on the host."""

    check = staticmethod(SUITE.check)
    flushes = 0

    @classmethod
    def time_ms(cls, torch_, fn, reps, before=None):  # noqa: ANN001 - run.py's signature
        before()
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3


def _flush() -> None:
    _HostSuite.flushes += 1


def measure_on_host(case: Any, **options: Any) -> dict[str, Any]:
    """measure() of `case` at its test size on the host emulator, timed by _HostSuite."""
    return measure.measure(
        torch,
        case,
        case.test_size,
        "bfloat16",
        reps=1,
        copy_gbs=1.0,
        flush=_flush,
        suite=_HostSuite,
        device="cpu",
        **options,
    )


def test_measure_on_host() -> None:
    """measure() end to end on the emulator (kfuse and torch eager), with a host timer."""
    case = CASES["layernorm_bwd"]
    _HostSuite.flushes = 0
    row = measure_on_host(case, peers=("kfuse", "torch eager"))
    assert row["status"] == "ok", row
    assert _HostSuite.flushes == 2
    assert row["segments"] >= 1 and len(row["schedulers"]) == row["segments"]
    assert row["kernels"] >= row["segments"] - row["schedulers"].count("expr_eval")
    for peer in ("kfuse", "torch eager"):
        assert row["peers"][peer]["check"] == "ok" and row["peers"][peer]["us"] > 0
    assert "ratio" not in row  # no torch.compile in this row


def test_measure_checks_each_peer_of_a_random_case_against_its_own_mask() -> None:
    """A dropout that draws its mask is a suite row like any other: kfuse checked against
    kfuse's Philox numbers, torch eager against the reference of the mask it drew."""
    case = CASES["huggingface_attn_fwd_rng"]
    row = measure_on_host(case, peers=("kfuse", "torch eager"))
    assert row["status"] == "ok", row
    assert all(row["peers"][peer]["check"] == "ok" for peer in ("kfuse", "torch eager"))


def test_measure_counts_the_kernels_of_a_segmented_fusion() -> None:
    """A segmented fusion's row has its segments and the kernels each segment launched (the
    summary once read a runner attribute that had gone, and every segmented row lost them)."""
    case = CASES["batchnorm_fwd_nchw"]  # three segments at its test size
    row = measure_on_host(case, peers=("kfuse",))
    assert row["status"] == "ok", row
    assert "segments_error" not in row, row["segments_error"]
    assert row["segments"] > 1
    assert row["kernels"] >= row["segments"] - row["schedulers"].count("expr_eval")


def test_kernel_profile_without_a_gpu_is_reported_not_fatal() -> None:
    """--kernels on a machine without CUPTI (the host emulator): the row keeps its timings
    and says why it has no kernel profile."""
    case = CASES["layernorm_bwd"]
    row = measure_on_host(case, peers=("kfuse",), kernels=True)
    assert row["status"] == "ok", row
    assert "kernel_profile" not in row and "ProfilerError" in row["kernel_profile_error"]
    assert row["peers"]["kfuse"]["us"] > 0


@pytest.mark.slow
# torch.compile's own import of TorchScript warns of its deprecation (torch 2.13): not kfuse's.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_measure_on_host_with_torch_compile() -> None:
    """The torch.compile peer too (CPU inductor): the peer functions compile as written."""
    case = CASES["softmax_bwd_dim0"]
    row = measure_on_host(case)
    assert row["status"] == "ok", row
    assert row["ratio"] > 0


def test_measure_reports_a_kfuse_error() -> None:
    case = CASES["rmsnorm_fwd"]

    def broken(dtype):  # noqa: ANN001
        raise RuntimeError("no kernel today")

    import dataclasses

    row = measure_on_host(dataclasses.replace(case, define=broken), peers=("kfuse", "torch eager"))
    assert row["status"] == "error"
    assert row["peers"]["kfuse"] == {"error": "RuntimeError: no kernel today"}
    assert row["peers"]["torch eager"]["check"] == "ok"


def _fake_results() -> dict:
    """A made-up run: two families, a mismatch and a skip (never committed as results)."""
    rows = []
    for family, name, sizes in (
        ("rmsnorm", "rmsnorm_fwd", [[64, 128], [32, 256]]),
        ("rmsnorm", "rmsnorm_bwd", [[64, 128], [32, 256]]),
        ("softmax", "softmax_fwd_dim0", [[64, 128]]),
    ):
        for k, shape in enumerate(sizes):
            us = {"kfuse": 10.0 + k, "torch.compile": 20.0, "torch eager": 40.0}
            peers = {
                p: {"us": t, "check": "ok", "fraction_of_copy": 0.5, "first_call_s": 1.0}
                for p, t in us.items()
            }
            row = {
                "family": family,
                "case": name,
                "shape": shape,
                "dtype": "bfloat16",
                "segments": 1,
                "schedulers": ["inner_persistent"],
                "peers": peers,
                "status": "ok",
                "ratio": 20.0 / (10.0 + k),
            }
            if name == "rmsnorm_bwd" and k == 1:
                peers["kfuse"]["check"] = "output 0: MISMATCH kfuse output 0: max abs err 1"
                row["status"] = "mismatch"
                del row["ratio"]
            rows.append(row)
    rows.append(
        {
            "family": "softmax",
            "case": "softmax_bwd_dim0",
            "shape": [64, 128],
            "dtype": "bfloat16",
            "status": "skipped: time budget (540 s) spent",
        }
    )
    return {"device": "made-up GPU", "torch": "0", "date": "today", "copy_gbs": 100.0, "rows": rows}


def test_tables() -> None:
    data = _fake_results()
    md = table.markdown(data)
    assert "| rmsnorm | rmsnorm_fwd | bfloat16 | 64x128 | 10.0 | 20.0 | 40.0 | 2.00x | 50% |" in md
    assert "11.0 (wrong)" in md and "mismatch: kfuse: output 0" in md
    assert "over 4 of 6 rows" in md
    assert "softmax_bwd_dim0 64x128 bfloat16: skipped: time budget" in md
    text = table.console(data["rows"])
    assert "rmsnorm_bwd" in text and "Geometric mean" in text
    assert table.geomean([2.0, 8.0]) == pytest.approx(4.0)
    lines = [progress(r) for r in data["rows"]]
    assert "kfuse 10.0 us (50% of copy" in lines[0] and "kfuse/compile 2.00x" in lines[0]
    assert "WRONG" in lines[3] and "kfuse check: output 0: MISMATCH" in lines[3]
    assert lines[-1].endswith("skipped: time budget (540 s) spent")


def test_chart(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    src = tmp_path / "run.json"
    src.write_text(json.dumps(_fake_results()))
    assert chart.main([str(src), str(tmp_path / "out")]) == 0
    pngs = sorted(p.name for p in (tmp_path / "out").glob("*.png"))
    assert pngs == ["rmsnorm.png", "softmax.png"]
    assert (tmp_path / "out" / "rmsnorm.png").read_bytes()[:4] == b"\x89PNG"
    assert "| softmax | softmax_fwd_dim0 |" in (tmp_path / "out" / "models.md").read_text()


def test_run_lists_without_a_gpu() -> None:
    script = BENCHMARKS / "models" / "run.py"
    out = subprocess.run(
        [sys.executable, str(script), "--list", "--quick", "--only", "norm"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    quick = plan(registry.select("norm"), True)
    assert out.splitlines()[-1] == f"{len(quick)} rows, {len(registry.select('norm'))} cases"
    assert "groupnorm_fwd_g32" in out and "softmax" not in out
    # 86 rows took 161 s on an H200 (2026-12-04); 118 at that rate about 220 s: the
    # device's 10-minute calls hold these.
    assert len(plan(registry.CASES, False)) <= 120


def test_the_transpose_family_sweeps_both_dtypes_by_default() -> None:
    """Issue 24: the transpose family runs bf16 and float32 over its sizes; the others bf16
    unless --dtype says; a quick run one dtype a case."""
    rows = plan(registry.CASES, False)
    for family, dtypes in [("transpose", {"bfloat16", "float32"}), ("rmsnorm", {"bfloat16"})]:
        assert {dtype for case, dtype, _ in rows if case.family == family} == dtypes
    transposes = [(c.name, d, s) for c, d, s in rows if c.name == "transpose_12"]
    assert len(transposes) == 2 * len(CASES["transpose_12"].sizes) >= 6
    assert all(d == case.dtypes[0] for case, d, _ in plan(registry.CASES, True))
    assert {d for case, d, _ in plan(registry.CASES, True) if case.name != "adam_step"} == {
        "bfloat16"
    }
    assert {d for _, d, _ in plan(registry.CASES, False, ["float32"])} == {"float32"}


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("name", list(CASES))
def test_case_on_gpu(name: str) -> None:
    """kfuse and the torch peer against the float64 reference at a mid size on the GPU."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    case = CASES[name]
    dtype = case.dtypes[0]
    inputs = _inputs(case, dtype, case.gpu_test_size, "cuda")
    _check("kfuse", _kfuse(case, dtype, inputs), case.reference(*inputs))
    _check_torch_peer(case, inputs)


def test_rope_computes_the_product_in_float_as_nvfuser_does() -> None:
    """nvFuser computes RoPE's bf16 products in Float and rounds once, after the sum; the
    case spells that with casts (kfuse keeps a bf16 product bf16, as torch does). Here the two
    products of a pair nearly cancel (5.71875 and 5.8125 turned by pi/4): rounding them to
    bf16 first is 0.027 off, more than bf16's tolerance for a result of 0.07. kfuse (on the
    emulator) and float32 products match the unrounded reference; products rounded first (the
    torch function run eagerly) do not."""
    from models import rope

    q = torch.tensor([5.71875, 5.8125], dtype=torch.bfloat16).reshape(1, 1, 1, 2)
    c = torch.tensor(0.70703125)  # cos(pi/4) = sin(pi/4) in bf16
    table = torch.stack([torch.stack([c, -c]), torch.stack([c, c])]).reshape(1, 2, 1, 2)
    table = table.to(torch.bfloat16)
    reference = rope.rope_without_cat_reference(q, table)
    as_float32 = rope.rope_without_cat_torch(q.float(), table.float())[0].to(torch.bfloat16)
    _check("float32", [as_float32], reference)
    _check("kfuse", _kfuse(CASES["rope_without_cat"], "bfloat16", [q, table]), reference)
    rounded_first = rope.rope_without_cat_torch(q, table)
    result = measure.check_outputs(torch, "torch", rounded_first, reference, SUITE.check)
    assert result["check"] != "ok"
