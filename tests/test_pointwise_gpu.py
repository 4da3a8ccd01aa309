"""Pointwise fusions on the GPU: fd.execute and fd.manual_execute against the eager reference,
with torch and CuPy inputs, across dtypes, shapes, strides, broadcasts and misaligned views."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from example_budget import examples
from kfuse import DataType, FusionDefinition, schedule
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close, fusions, inputs_for
from test_pointwise_emulator import with_rows

pytestmark = pytest.mark.gpu

ALL = (
    DataType.Float,
    DataType.Double,
    DataType.Half,
    DataType.BFloat16,
    DataType.Int32,
    DataType.Int,
    DataType.Bool,
)
CUPY = tuple(d for d in ALL if d is not DataType.BFloat16)


def check(fd: FusionDefinition, inputs: list, outputs: list) -> None:
    assert_outputs_close(fd.fusion, outputs, evaluate(fd.fusion, inputs), inputs)


@settings(max_examples=examples(40))
@given(data=st.data(), fd=fusions(kinds={"pointwise"}, dtypes=ALL, max_rank=4))
def test_execute_matches_reference_with_torch(data: st.DataObject, fd: FusionDefinition) -> None:
    pytest.importorskip("torch")
    inputs = data.draw(inputs_for(fd, framework="torch", device="cuda", max_elements=1 << 16))
    outputs = fd.execute(inputs)
    for out in outputs:
        assert out.is_cuda
    check(fd, inputs, outputs)


@settings(max_examples=examples(25))
@given(data=st.data(), fd=fusions(kinds={"pointwise"}, dtypes=CUPY, max_rank=3))
def test_execute_matches_reference_with_cupy(data: st.DataObject, fd: FusionDefinition) -> None:
    cupy = pytest.importorskip("cupy")
    inputs = data.draw(inputs_for(fd, framework="cupy", max_elements=1 << 16))
    outputs = fd.execute(inputs)
    for out in outputs:
        assert isinstance(out, cupy.ndarray)
    check(fd, inputs, outputs)


@settings(max_examples=examples(25))
@given(data=st.data(), fd=fusions(kinds={"pointwise"}, dtypes=ALL, max_rank=3))
def test_manual_execute_with_edited_params(data: st.DataObject, fd: FusionDefinition) -> None:
    pytest.importorskip("torch")
    inputs = data.draw(
        inputs_for(fd, framework="torch", device="cuda", max_elements=1 << 14, allow_empty=False)
    )
    ok, _ = schedule.can_schedule(fd.fusion, SchedulerType.pointwise, inputs)
    if not ok:
        return
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
    hp.vectorization_factor = data.draw(st.sampled_from([1, 2, 4, 8]))
    hp.unroll_factor = data.draw(st.sampled_from([1, 2, 4]))
    hp.block_x, hp.block_y = data.draw(st.sampled_from([(32, 4), (128, 1), (256, 2)]))
    check(fd, inputs, with_rows(fd, inputs, hp, data))


def test_tutorial_exp_add_on_4x4() -> None:
    torch = pytest.importorskip("torch")
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.exp(fd.ops.add(a, b)))
    x, y = torch.randn(4, 4, device="cuda"), torch.randn(4, 4, device="cuda")
    assert schedule.find_compatible_schedulers(fd.fusion, [x, y]) == [SchedulerType.pointwise]
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, [x, y])
    (out,) = fd.manual_execute([x, y], heuristic_params=hp)
    torch.testing.assert_close(out, torch.exp(x + y))
    with FusionDefinition() as fd2:
        t = fd2.define_tensor(shape=[-1, -1])
        fd2.add_output(fd2.ops.exp(fd2.ops.sum(t, dims=[1])))
    ok, why = schedule.can_schedule(fd2.fusion, SchedulerType.pointwise, [x])
    assert not ok and "reduction" in why


def test_runs_on_the_callers_stream_and_on_a_given_stream() -> None:
    torch = pytest.importorskip("torch")
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.mul(fd.ops.sin(a), 3.0))
    x = torch.randn(1 << 24, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        (out,) = fd.execute([x])  # the framework's current stream: `side`
    side.synchronize()
    torch.testing.assert_close(out, torch.sin(x) * 3.0)
    other = torch.cuda.Stream()
    (out2,) = fd.execute([x], stream=other.cuda_stream)
    other.synchronize()
    torch.testing.assert_close(out2, torch.sin(x) * 3.0)


def test_bad_inputs_raise_input_error_before_any_launch() -> None:
    torch = pytest.importorskip("torch")
    from kfuse import InputError

    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[1, -1])
        fd.add_output(fd.ops.add(a, b))
    good_a, good_b = torch.randn(3, 4, device="cuda"), torch.randn(1, 4, device="cuda")
    bad = [
        ([good_a], "takes 2 inputs"),
        ([good_a.double(), good_b], "Double"),
        ([good_a, torch.randn(2, 4, device="cuda")], "broadcast"),
        ([good_a, good_b.cpu()], "different devices"),
        ([good_a[0], good_b], "rank"),
    ]
    try:
        import cupy

        bad.append(([good_a, cupy.asarray(good_b.cpu().numpy())], "frameworks"))
    except ImportError:
        pass
    for inputs, words in bad:
        with pytest.raises(InputError, match=words):
            fd.execute(inputs)
    (out,) = fd.execute([good_a, good_b])  # and the process goes on
    torch.testing.assert_close(out, good_a + good_b)


def test_w1_full_size_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        bf = fd.ops.broadcast_in_dim(
            fd.ops.cast(b, DataType.Float), shape=fd.ops.shape(x), broadcast_dims=[1]
        )
        y = fd.ops.mul(fd.ops.gelu(fd.ops.add(xf, bf), approximate="tanh"), 0.5)
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    xs = torch.randn(16384, 8192, device="cuda").to(torch.bfloat16)
    bs = torch.randn(8192, device="cuda").to(torch.bfloat16)
    (out,) = fd.execute([xs, bs])
    want = torch.nn.functional.gelu(xs.double() + bs.double(), approximate="tanh") * 0.5
    torch.testing.assert_close(out.double(), want, atol=1e-2, rtol=1e-2)


def test_fast_bf16_forms_hold_over_the_whole_range() -> None:
    """exp/sigmoid/silu/gelu_tanh take hardware approximations for bf16-only uses; check them
    against float64 from far negative to far positive inputs, where cancellation would show."""
    torch = pytest.importorskip("torch")
    x = torch.linspace(-30, 30, 1 << 20, device="cuda").to(torch.bfloat16)
    for op, ref in [
        ("exp", torch.exp),
        ("sigmoid", torch.sigmoid),
        ("silu", torch.nn.functional.silu),
        ("gelu_tanh", lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
    ]:
        with FusionDefinition() as fd:
            t = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
            tf = fd.ops.cast(t, DataType.Float)
            y = (
                fd.ops.gelu(tf, approximate="tanh")
                if op == "gelu_tanh"
                else getattr(fd.ops, op)(tf)
            )
            fd.add_output(fd.ops.cast(y, DataType.BFloat16))
        (out,) = fd.execute([x])
        assert f"kf::{op}_fast(" in fd.last_cuda_source()
        want = ref(x.double())
        finite = torch.isfinite(want)
        torch.testing.assert_close(out.double()[finite], want[finite], rtol=1.6e-2, atol=1e-3)


def test_maxrregcount_limits_the_kernels_registers() -> None:
    """CompileParams.maxrregcount reaches NVRTC: the bias + gelu kernel, which takes more
    registers by default, fits the limit and computes the same values."""
    torch = pytest.importorskip("torch")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        bx = fd.ops.broadcast_in_dim(b, shape=fd.ops.shape(x), broadcast_dims=[1])
        fd.add_output(fd.ops.gelu(fd.ops.add(x, bx), approximate="tanh"))
    inputs = [torch.randn(4096, 8192, device="cuda"), torch.randn(8192, device="cuda")]
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
    (default_out,) = fd.manual_execute(inputs, heuristic_params=hp)
    default_regs = fd._executor_cache.last_compiled.launches[0].kernel.num_regs
    assert default_regs > 32
    cp = hp.cparams
    cp.maxrregcount = 32
    hp.cparams = cp
    (out,) = fd.manual_execute(inputs, heuristic_params=hp)
    assert fd._executor_cache.last_compiled.launches[0].kernel.num_regs <= 32
    torch.testing.assert_close(out, default_out, atol=1e-6, rtol=1e-6)
