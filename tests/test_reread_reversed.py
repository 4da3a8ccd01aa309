"""switches.REREAD_REVERSED: a pointwise kernel of a segmented call that reads again an input
the segment before it read takes its rows' blocks from the last (PointwiseKernelSpec.
reverse_rows), so that it first reads the part L2 may still hold. Which kernels take it (and
none with the switch off), and the reversed kernels against the reference on the emulator,
with one row a thread and two, whole grids and grid-strided ones."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gpu_support import requires_gpu
from kfuse import schedule, switches
from kfuse.dtypes import DataType
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close
from outer_norm_fusions import batch_norm_nhwc
from test_pointwise_rows import inputs_nhwc, normalize_nhwc


def _segmented_batch_norm() -> tuple[object, list[np.ndarray]]:
    """A channels-last batch norm whose columns (3136 rows) leave outer_persistent a block
    less than a sector wide: a statistics reduction, then a normalizing pointwise kernel that
    reads x again."""
    fd = batch_norm_nhwc(DataType.BFloat16)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3136, 1, 24)).astype(ml_dtypes.bfloat16)
    w, b = (rng.standard_normal(24).astype(ml_dtypes.bfloat16) for _ in range(2))
    return fd, [x, w, b]


@pytest.mark.parametrize("on", [True, False])
def test_the_second_pass_over_x_is_reversed_only_with_the_switch(
    on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(switches, "REREAD_REVERSED", on)
    fd, inputs = _segmented_batch_norm()
    out = fd.execute(inputs)
    names = [launch.name for launch in fd.last_program().launches]
    assert names[0].startswith("kfuse_outer_") and names[-1].startswith("kfuse_pointwise_")
    assert names[-1].endswith("_rev") == on
    assert not any(n.endswith("_rev") for n in names[:-1])  # the reduction reads x first
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


@pytest.mark.parametrize(
    ("shape", "rows", "grid_y"),
    [
        ((3, 40, 64), 1, None),  # a block of rows for each, the whole grid reversed
        ((3, 40, 64), 2, None),  # two rows a thread
        ((2, 6, 100), 1, 2),  # a ragged row end, 2 blocks striding over 12 rows
        ((2, 6, 100), 2, 2),
    ],
)
def test_reversed_rows_match_the_reference(
    shape: tuple[int, int, int], rows: int, grid_y: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pointwise kernel reversed (rereads_warm_input patched), whatever its segment."""
    from kfuse.schedule import warm_inputs

    monkeypatch.setattr(warm_inputs, "rereads_warm_input", lambda plan, info: True)
    fd = normalize_nhwc()
    inputs = inputs_nhwc(*shape, seed=sum(shape))
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.pointwise, inputs)
    hp.vectorization_factor, hp.unroll_factor, hp.unroll_factor_outer = 8, 1, rows
    hp.block_x, hp.block_y = 8, 4
    hp.grid_x = 1
    hp.grid_y = grid_y or -(-shape[0] * shape[1] // (4 * rows))
    out = fd.manual_execute(inputs, heuristic_params=hp)
    assert_outputs_close(fd.fusion, out, evaluate(fd.fusion, inputs), inputs)
    source = fd.last_cuda_source()
    assert "_rev" in source and "(gridDim.y - 1u - blockIdx.y)" in source


@pytest.mark.gpu
@requires_gpu
def test_the_reversed_second_pass_on_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Channels-last batch norms whose statistics are a reduction of their own, as the model
    suite's [256, 2048, 7, 7] (12544 rows) and a longer one, with the switch on."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(switches, "REREAD_REVERSED", True)
    fd = batch_norm_nhwc(DataType.BFloat16)
    for n, c in ((256 * 49, 2048), (64 * 3136, 256)):
        torch.manual_seed(n)
        x = torch.randn(1, n, 1, c, device="cuda").to(torch.bfloat16)
        w, b = (torch.randn(c, device="cuda").to(torch.bfloat16) for _ in range(2))
        out = fd.execute([x, w, b])
        assert fd.last_program().launches[-1].name.endswith("_rev")
        assert_outputs_close(fd, out, evaluate(fd.fusion, [x, w, b]), [x, w, b])
