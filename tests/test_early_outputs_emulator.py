"""Outputs that need no reduction's result are stored in the inner persistent kernel's first
pass (kfuse.codegen.early_outputs, switches.EARLY_OUTPUTS), on the host emulator: a dropout +
layer norm forward that draws its mask and returns it, with its rows in registers, in shared
memory, reloaded in part, split over a cluster, and ending inside a vector. Each gives the
reference's outputs and, bit for bit, the outputs of the kernel with the switch off. An output
that needs a reduction's result is stored in the output pass; one written into an input that
the output pass reads again leaves that pass the input's old values."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from kfuse import schedule, switches
from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close

IP = SchedulerType.inner_persistent
BF16 = ml_dtypes.bfloat16


def dropout_layer_norm_drawing_its_mask() -> FusionDefinition:
    """y = layer_norm(x2 + x1 * mask / 0.8), mask = uniform < 0.8 drawn in the fusion;
    outputs y, mean, the mask and x1 * 2 (a second output that needs no reduction)."""
    with FusionDefinition() as fd:
        x1 = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        x2 = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        seed = fd.define_scalar(dtype=DataType.Int)
        offset = fd.define_scalar(dtype=DataType.Int)
        u = fd.ops.uniform(
            0.0, 1.0, fd.ops.shape(x1), rng_seed=seed, rng_offset=offset, dtype=DataType.Float
        )
        mask = fd.ops.lt(u, 0.8)
        a, b = fd.ops.cast(x1, DataType.Float), fd.ops.cast(x2, DataType.Float)
        x = fd.ops.add(b, fd.ops.mul(fd.ops.mul(a, fd.ops.cast(mask, DataType.Float)), 1.25))
        var, mean = fd.ops.var_mean(x, dims=[1], correction=0, keepdim=True)
        y = fd.ops.mul(fd.ops.sub(x, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5)))
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
        fd.add_output(mean)
        fd.add_output(mask)
        fd.add_output(fd.ops.mul(a, 2.0))
    return fd


def inputs_of(rows: int, n: int) -> list[Any]:
    rng = np.random.default_rng(n)
    x1, x2 = (rng.standard_normal((rows, n)).astype(BF16) for _ in range(2))
    return [x1, x2, 1234, 5]


LAYOUTS = {
    "registers": {"smem_persistent": False, "reload_batch_size": 0},
    "shared memory": {"smem_persistent": True, "reload_batch_size": 0},
    "reloaded": {"smem_persistent": False, "reload_batch_size": 1},
    "cluster": {"smem_persistent": False, "reload_batch_size": 0, "cluster_size": 2},
}


def run(fd: FusionDefinition, inputs: list[Any], layout: dict[str, Any]) -> list[Any]:
    hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
    for key, value in layout.items():
        setattr(hp, key, value)
    if hp.cluster_size > 1:
        hp.block_y, hp.grid_x = 1, inputs[0].shape[0] * hp.cluster_size
        hp.persistent_batch_size = -(-inputs[0].shape[1] // (hp.block_x * hp.cluster_size))
        hp.vectorize_reduction = 1
    return fd.manual_execute(inputs, heuristic_params=hp)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("n", [1000, 4101])
def test_the_first_pass_stores_the_mask_as_the_output_pass_did(
    monkeypatch: pytest.MonkeyPatch, layout: str, n: int
) -> None:
    fd = dropout_layer_norm_drawing_its_mask()
    inputs = inputs_of(6, n)
    early = run(fd, inputs, LAYOUTS[layout])
    source = fd.last_cuda_source()
    assert "_eo(" in source and "_early(" in source
    assert_outputs_close(fd, early, evaluate(fd.fusion, inputs), inputs)
    monkeypatch.setattr(switches, "EARLY_OUTPUTS", False)
    fd_late = dropout_layer_norm_drawing_its_mask()
    late = run(fd_late, inputs, LAYOUTS[layout])
    assert "_early(" not in fd_late.last_cuda_source()
    for got, want in zip(early, late, strict=True):
        np.testing.assert_array_equal(got, want)


def test_outputs_that_need_a_result_are_stored_after_the_reductions() -> None:
    """Of the four outputs, the mask and x1 * 2 are stored early; y (the mean's) is not:
    the early call passes zeros for the results, and y's value is taken from the output
    pass's call."""
    fd = dropout_layer_norm_drawing_its_mask()
    inputs = inputs_of(3, 64)
    fd.execute(inputs)
    source = fd.last_cuda_source()
    assert fd.last_scheduler() is IP
    calls = [line for line in source.splitlines() if "_early(" in line and "__device__" not in line]
    (early_call,) = calls
    assert "e2[j]" in early_call and "e3[j]" in early_call and "d0" in early_call


def test_an_early_output_written_into_an_input_leaves_the_later_passes_its_old_values() -> None:
    """x1 * 2 written into x1 and stored in the first pass, while the output pass reads x1
    again (a reloaded slot): the staged write (kfuse.engine.aliasing) keeps x1's old values
    until the kernel has run."""
    with FusionDefinition() as fd:
        x1 = fd.define_tensor(shape=[-1, -1])
        s = fd.ops.sum(x1, dims=[1], keepdim=True)
        fd.add_output(fd.ops.div(x1, s))
        fd.add_output(fd.ops.mul(x1, 2.0), alias_input=x1)
    x = np.random.default_rng(0).random((4, 3000)).astype(np.float32) + 0.5
    want = evaluate(fd.fusion, [x.copy()])
    inputs = [x]
    hp = schedule.compute_heuristics(fd.fusion, IP, inputs)
    hp.smem_persistent, hp.reload_batch_size = False, 1
    (got,) = fd.manual_execute(inputs, heuristic_params=hp)
    np.testing.assert_allclose(got, want[0], rtol=1e-6)
    np.testing.assert_allclose(x, want[1], rtol=1e-6)
    assert "_early(" in fd.last_cuda_source() and "rv0" in fd.last_cuda_source()
