"""Segmentation on the GPU: segmented fusions, library (expr_eval) segments next to generated
ones, and softmax over rows too long to hold, against torch and kfuse.reference."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from example_budget import examples
from gpu_support import requires_gpu
from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close, fusions, inputs_for

pytestmark = [pytest.mark.gpu, requires_gpu]
torch = pytest.importorskip("torch")

PW, RED, EE = SchedulerType.pointwise, SchedulerType.reduction, SchedulerType.expr_eval


def randn(*shape: int, dtype: object = None, seed: int = 0) -> object:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=dtype or torch.float32)


def check(fd: FusionDefinition, inputs: list) -> list:
    out = fd.execute(inputs)
    torch.cuda.synchronize()
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


def test_sum_of_sum_over_different_axes() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.sum(fd.ops.sum(a + b, -1), -1))
    for shape in [(2, 5), (1000, 4099)]:
        inputs = [randn(*shape), randn(*shape, seed=1)]
        assert [s.scheduler for s in fd.segments(inputs)] == [RED, RED]
        check(fd, inputs)


def test_independent_outputs_and_input_copies() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.exp(a))
        fd.add_output(fd.ops.sum(b, [0]))
        fd.add_output(b)
    inputs = [randn(1000), randn(300, 70, seed=1)]
    out = check(fd, inputs)
    assert out[2].data_ptr() != inputs[1].data_ptr()


def test_linear_bf16_plus_bias_is_an_expr_eval_and_a_pointwise_segment() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        fd.add_output(fd.ops.linear(x, w) + b)
    inputs = [
        randn(2, 4, 16, dtype=torch.bfloat16),
        randn(16, 16, dtype=torch.bfloat16, seed=1),
        randn(16, dtype=torch.bfloat16, seed=2),
    ]
    assert [s.scheduler for s in fd.segments(inputs)] == [EE, PW]
    out = fd.execute(inputs)
    assert out[0].dtype == torch.bfloat16
    want = torch.nn.functional.linear(inputs[0], inputs[1]) + inputs[2]
    torch.testing.assert_close(out[0], want)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


def test_matmul_runs_on_the_callers_stream() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.relu(fd.ops.matmul(a, b)))
    inputs = [randn(3, 64, 32), randn(32, 48, seed=1)]
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = fd.execute(inputs)
    stream.synchronize()
    torch.testing.assert_close(out[0], torch.relu(inputs[0] @ inputs[1]))


@pytest.mark.parametrize("row", [2**20, 2**21])  # fp32: longer than a cluster holds
def test_softmax_over_rows_too_long_to_hold(row: int) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.softmax(x, -1))
    inputs = [randn(8, row)]
    segs = fd.segments(inputs)
    assert len(segs) >= 2 and {s.scheduler for s in segs} == {RED, PW}
    out = check(fd, inputs)
    torch.testing.assert_close(out[0], torch.softmax(inputs[0], -1))


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_random_multi_segment_fusions(data: st.DataObject) -> None:
    fd = data.draw(fusions(kinds={"multi_segment", "multi_reduction"}, max_ops=4))
    inputs = data.draw(inputs_for(fd, framework="torch", device="cuda", max_elements=4096))
    check(fd, inputs)


def test_an_embedding_over_2d_ids_then_a_sum_is_two_kernels() -> None:
    """Thunder's embedding region (small_fusions.embedding_sum) at a transformer's sizes:
    the gathered rows read in the ids' shape by the reduction, ids checked on the device; an
    id past the table is an InputError by the next call at latest."""
    from kfuse.errors import InputError
    from small_fusions import embedding_sum

    fd = embedding_sum()
    g = torch.Generator(device="cuda").manual_seed(3)
    ids = torch.randint(0, 32768, (4, 1024), generator=g, device="cuda")
    table = randn(32768, 2048, dtype=torch.bfloat16, seed=4)
    inputs = [ids, table, randn(4, 1024, 2048, seed=5)]
    assert [s.scheduler for s in fd.segments(inputs)] == [PW, RED]
    check(fd, inputs)
    ids[2, 7] = 32768
    with pytest.raises(InputError, match="outside"):
        fd.execute(inputs)
        fd.execute(inputs)  # the flags of a launch are read by the call after it
