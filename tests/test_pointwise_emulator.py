"""Generated pointwise kernels run through the host emulator match the eager reference.

These are the CI guard for code generation and heuristics: random fusions from
kfuse.testing, random inputs (edge sizes, strided, broadcast and misaligned views), fd.execute
on NumPy and CPU torch arrays (which selects the emulator), compared with reference.evaluate.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from example_budget import examples
from kfuse import schedule
from kfuse.dtypes import DataType
from kfuse.errors import SchedulerError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close, fusions, inputs_for

NUMPY_DTYPES = (
    DataType.Float,
    DataType.Double,
    DataType.Half,
    DataType.Int32,
    DataType.Int,
    DataType.Bool,
)
TORCH_DTYPES = NUMPY_DTYPES + (DataType.BFloat16,)


def run_and_compare(fd: FusionDefinition, inputs: list) -> None:
    expected = evaluate(fd.fusion, inputs)
    actual = fd.execute(inputs)
    # SchedulerType.none: segmented (outputs of unrelated shapes need one kernel each).
    assert fd.last_scheduler() in (
        SchedulerType.pointwise,
        SchedulerType.transpose,
        SchedulerType.no_op,
        SchedulerType.none,
    )
    assert_outputs_close(fd.fusion, actual, expected, inputs)


@settings(max_examples=examples(25))
@given(data=st.data(), fd=fusions(kinds={"pointwise"}, dtypes=NUMPY_DTYPES, max_rank=3))
def test_random_pointwise_fusions_on_numpy(data: st.DataObject, fd: FusionDefinition) -> None:
    inputs = data.draw(inputs_for(fd, framework="numpy", max_elements=2048))
    run_and_compare(fd, inputs)


@settings(max_examples=examples(15))
@given(data=st.data(), fd=fusions(kinds={"pointwise"}, dtypes=TORCH_DTYPES, max_rank=3))
def test_random_pointwise_fusions_on_cpu_torch(data: st.DataObject, fd: FusionDefinition) -> None:
    pytest.importorskip("torch")
    inputs = data.draw(inputs_for(fd, framework="torch", max_elements=2048))
    run_and_compare(fd, inputs)


@settings(max_examples=examples(10))
@given(
    data=st.data(),
    fd=fusions(kinds={"pointwise"}, dtypes=(DataType.Float, DataType.Half), max_rank=3),
)
def test_manual_execute_with_edited_params_matches(
    data: st.DataObject, fd: FusionDefinition
) -> None:
    inputs = data.draw(inputs_for(fd, framework="numpy", max_elements=1024, allow_empty=False))
    ok, _ = schedule.can_schedule(fd.fusion, SchedulerType.pointwise, inputs)
    if not ok:
        return
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
    hp.unroll_factor = data.draw(st.sampled_from([1, 2, 4]))
    hp.vectorization_factor = data.draw(st.sampled_from([1, 2, 4, 8]))
    hp.block_x, hp.block_y = data.draw(st.sampled_from([(32, 1), (64, 2), (128, 4)]))
    hp.grid_x, hp.grid_y = data.draw(st.sampled_from([(1, 1), (2, 3)]))
    expected = evaluate(fd.fusion, inputs)
    assert_outputs_close(fd.fusion, with_rows(fd, inputs, hp, data), expected, inputs)


def with_rows(fd: FusionDefinition, inputs: list, hp: object, data: st.DataObject) -> list:
    """fd.manual_execute with hp, or with hp taking 2 rows a thread (unroll_factor_outer, with
    unroll_factor 1) where the draw says so and the layout has rows for it; a layout that has
    not is refused by name."""
    if data.draw(st.booleans()):
        hp.unroll_factor, hp.unroll_factor_outer = 1, 2  # type: ignore[attr-defined]
        try:
            return fd.manual_execute(inputs, heuristic_params=hp)
        except SchedulerError as exc:
            assert "unroll_factor_outer = 2" in str(exc)
            hp.unroll_factor_outer = 1  # type: ignore[attr-defined]
    return fd.manual_execute(inputs, heuristic_params=hp)


def test_w1_shape_class_through_the_emulator() -> None:
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
    xs = torch.randn(33, 264).to(torch.bfloat16)
    bs = torch.randn(264).to(torch.bfloat16)
    (out,) = fd.execute([xs, bs])
    want = torch.nn.functional.gelu(xs.float() + bs.float(), approximate="tanh") * 0.5
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, want.to(torch.bfloat16), atol=1e-2, rtol=1e-2)
    assert "kf::load_vec<8>" in fd.last_cuda_source()


def test_permuted_and_expanded_inputs() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1])
        b = fd.define_tensor(shape=[-1, 1])
        pa = fd.ops.permute(a, [2, 0, 1])
        eb = fd.ops.broadcast_in_dim(b, shape=[5, 3, 4], broadcast_dims=[0, 1])
        fd.add_output(fd.ops.add(pa, eb))
    a = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((5, 1)).astype(np.float32)
    (out,) = fd.execute([a, b])
    np.testing.assert_allclose(out, np.transpose(a, (2, 0, 1)) + b[:, :, None], rtol=1e-6)


def test_planted_off_by_one_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutate the generated source (the tail loop bound) and check the suite notices."""
    import kfuse.codegen.pointwise as pw

    real = pw.emit_pointwise

    def mutated(plan, spec):  # type: ignore[no-untyped-def]
        source, name = real(plan, spec)
        bad = source.replace("i0 + j < n_inner", "i0 + j < n_inner - 1")
        assert bad != source
        return bad, name

    monkeypatch.setattr(pw, "emit_pointwise", mutated)
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1])
        fd.add_output(fd.ops.mul(a, 3.0))
    x = np.arange(1, 10, dtype=np.float32)  # 9 elements: the ragged tail path runs
    out = fd.execute([x])[0]
    with pytest.raises(AssertionError):
        assert_outputs_close(fd.fusion, [out], evaluate(fd.fusion, [x]), [x])


def test_vectors_inside_a_ragged_rows_end_stay_vectors() -> None:
    """Rows of 56 x 56 bf16 (392 vectors of 8) over 2 blocks of 128 threads x 2 vectors: the
    second block's threads each reach past the row end with their second vector, and their
    first vector, which lies inside the row, is still loaded and stored whole (a third of a
    batch norm's elements went element by element when that path did). Against the
    reference, through that path."""
    torch = pytest.importorskip("torch")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        wb = fd.ops.broadcast_in_dim(
            fd.ops.cast(w, DataType.Float), shape=fd.ops.shape(x), broadcast_dims=[1]
        )
        fd.add_output(
            fd.ops.cast(fd.ops.mul(fd.ops.cast(x, DataType.Float), wb), DataType.BFloat16)
        )
    inputs = [torch.randn(2, 3, 56 * 56).to(torch.bfloat16), torch.randn(3).to(torch.bfloat16)]
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
    hp.vectorization_factor, hp.unroll_factor = 8, 2
    hp.block_x, hp.block_y, hp.grid_x, hp.grid_y = 128, 1, 2, 6
    hp.lparams.block_x, hp.lparams.block_y = 128, 1
    hp.lparams.grid_x, hp.lparams.grid_y = 2, 6
    (out,) = fd.manual_execute(inputs, heuristic_params=hp)
    assert_outputs_close(fd.fusion, [out], evaluate(fd.fusion, inputs), inputs)
    ragged = fd.last_cuda_source().split("} else {", 1)[1]
    assert "kf::load_vec<8>(in0" in ragged and "kf::store_vec<8>(out0" in ragged
