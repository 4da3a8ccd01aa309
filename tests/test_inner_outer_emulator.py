"""The inner_outer_persistent scheduler end to end on the host emulator: normalization
backward fusions (rows and columns reduced in one pass) against kfuse.reference, across row
lengths, row counts (one block, several, rows left over), blocks of several rows, and
pinned params; plus what it declines."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kfuse import schedule, switches
from kfuse.dtypes import DataType
from kfuse.errors import SchedulerError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close
from norm_fusions import (
    BF16,
    layer_norm_backward,
    layer_norm_backward_inputs,
    norm_backward_on_h200,
    rms_norm_backward,
    rms_norm_backward_inputs,
    shared_column_input,
)

IO = SchedulerType.inner_outer_persistent


def check(fd: FusionDefinition, inputs: list, params: object = None) -> list:
    if params is None:
        out = fd.execute(inputs)
        assert fd.last_scheduler() is IO
        assert len(fd.segments(inputs)) == 1
    else:
        out = fd.manual_execute(inputs, heuristic_params=params)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


@pytest.mark.parametrize(("n", "h"), [(1, 8), (5, 64), (33, 96), (64, 1000), (7, 2048)])
def test_rms_norm_backward(n: int, h: int) -> None:
    check(rms_norm_backward(), rms_norm_backward_inputs(n, h))


@pytest.mark.parametrize(("n", "h", "dtype"), [(19, 256, BF16), (40, 130, np.float32)])
def test_layer_norm_backward(n: int, h: int, dtype: type) -> None:
    kind = DataType.BFloat16 if dtype is BF16 else DataType.Float
    check(layer_norm_backward(kind), layer_norm_backward_inputs(n, h, dtype))


def test_many_blocks_each_with_one_partial() -> None:
    """More rows than blocks: each block walks several rows into its one partial."""
    fd = rms_norm_backward()
    inputs = rms_norm_backward_inputs(300, 64)
    params = schedule.compute_heuristics(fd.fusion, IO, inputs)
    params.grid_x = 3
    check(fd, inputs, params)
    params.block_y = 1
    params.grid_x = 7
    check(fd, inputs, params)


@pytest.mark.parametrize("block_y", [1, 4])
def test_rows_held_in_shared_memory(block_y: int) -> None:
    """The held rows in shared memory (as long rows are), before the column accumulators."""
    fd = layer_norm_backward()
    inputs = layer_norm_backward_inputs(37, 200)
    params = schedule.compute_heuristics(fd.fusion, IO, inputs)
    params.smem_persistent = True
    params.block_y = block_y
    params.grid_x = 4
    check(fd, inputs, params)


def dropout_norm_backward_like(bias_sum: bool = True) -> FusionDefinition:
    """Four row inputs (x, the gradient, a weight given full size, a bool mask), the row
    output and two column sums (one without bias_sum), as a dropout + layer norm backward
    has."""
    with FusionDefinition() as fd:
        x_in, g_in, w_in = (
            fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16) for _ in "xgw"
        )
        keep = fd.define_tensor(shape=[-1, -1], dtype=DataType.Bool)
        x, g, w = (fd.ops.cast(t, DataType.Float) for t in (x_in, g_in, w_in))
        gw = fd.ops.where(keep, fd.ops.mul(g, w), 0.0)
        row = fd.ops.sum(fd.ops.mul(gw, x), dims=[1])
        dx = fd.ops.sub(gw, fd.ops.mul(x, fd.ops.broadcast(row, [False, True])))
        fd.add_output(fd.ops.cast(dx, DataType.BFloat16))
        fd.add_output(fd.ops.sum(fd.ops.mul(g, x), dims=[0]))
        if bias_sum:
            fd.add_output(fd.ops.sum(g, dims=[0]))
    return fd


def dropout_norm_backward_inputs(rows: int, n: int) -> list:
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal((rows, n)).astype(BF16) for _ in range(3)]
    return [*inputs, rng.random((rows, n)) < 0.7]


@pytest.mark.parametrize("prefetch", [True, False])
@pytest.mark.parametrize(("rows", "block_y", "grid_x"), [(37, 1, 4), (37, 4, 3), (5, 1, 8)])
def test_next_row_copied_during_the_output_pass(
    monkeypatch: pytest.MonkeyPatch, prefetch: bool, rows: int, block_y: int, grid_x: int
) -> None:
    """Rows held in shared memory and grid-strided: each thread copies its slots of the
    block's next row as the output pass frees them (vectors of 16 bytes, and the bool mask's
    of 8). With and without it, over blocks of one and several rows,
    rows left over, and more blocks than rows (no next row)."""
    from kfuse.schedule.registry import scheduler_for
    from planning import gpu_info

    monkeypatch.setattr(switches, "PREFETCH_NEXT_ROW", prefetch)
    fd = dropout_norm_backward_like(bias_sum=False)
    inputs = dropout_norm_backward_inputs(rows, 256)
    info = gpu_info(fd, [a.shape for a in inputs], "h200")
    params = scheduler_for(IO).heuristics(fd.fusion, info)
    params.smem_persistent = True
    params.block_y, params.grid_x = block_y, grid_x
    main = scheduler_for(IO).kernels(fd.fusion, info, params)[0]
    assert ("_pf" in main.name) is prefetch
    held = re.findall(r"kf::Tensor<(?:kf::bfloat16|bool), 2, int> in(\d)", main.source)
    assert len(held) == 4  # x, g, w (vectors of 16 bytes) and the mask (of 8)
    for i in held:
        assert (f"&h{i}[" in main.source and f"in{i}, next_in{i} + i0);" in main.source) is prefetch
    check(fd, inputs, params)


@pytest.mark.parametrize(("block_y", "reload"), [(1, 1), (1, 3), (2, 2)])
def test_rows_held_in_part_reload_the_rest(block_y: int, reload: int) -> None:
    """A row held in shared memory only in part (the row and the column accumulators do not
    fit a block): each pass after the first reads the last `reload` slots again."""
    fd = dropout_norm_backward_like()
    inputs = dropout_norm_backward_inputs(37, 200)
    params = schedule.compute_heuristics(fd.fusion, IO, inputs)
    params.smem_persistent = True
    params.block_x, params.persistent_batch_size, params.reload_batch_size = 8, 4, reload
    params.block_y, params.grid_x = block_y, 5
    check(fd, inputs, params)


def test_long_rows_and_their_columns_reload_what_shared_memory_cannot_hold() -> None:
    """On an H200, 16384 columns of four held inputs (112 KB a row) and two column sums
    (128 KB) do not fit a block: the heuristics leave the row's last slot unheld rather than
    decline the fusion (which ran as two kernels reading the data twice)."""
    from kfuse.schedule.registry import scheduler_for
    from planning import gpu_info

    fd = dropout_norm_backward_like()
    shapes = [(2048, 16384)] * 4
    info = gpu_info(fd, shapes, "h200")
    scheduler_for(IO).check(fd.fusion, info)
    params = scheduler_for(IO).heuristics(fd.fusion, info)
    assert params.smem_persistent
    assert (params.block_x, params.persistent_batch_size, params.reload_batch_size) == (512, 4, 1)
    main = scheduler_for(IO).kernels(fd.fusion, info, params)[0]
    assert main.shared_mem <= info.device.shared_mem_per_block_optin
    params.reload_batch_size = 0  # the whole row: more shared memory than a block has
    with pytest.raises(SchedulerError, match="bytes of shared memory a block"):
        scheduler_for(IO).kernels(fd.fusion, info, params)


def test_column_max_and_a_row_output() -> None:
    """A column max and a row output (the row sums) next to the full-size output."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        row = fd.ops.sum(x, dims=[1])
        fd.add_output(fd.ops.div(x, fd.ops.broadcast(row, [False, True])))
        fd.add_output(fd.ops.max(x, dims=[0]))
        fd.add_output(row)
    x = np.random.default_rng(1).standard_normal((45, 70)).astype(np.float32) + 3
    check(fd, [x])


def test_three_dimensional_rows() -> None:
    """Rows over [B, S] (merged), columns the hidden axis."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        g = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        mean = fd.ops.sum(fd.ops.mul(x, g), dims=[2])
        fd.add_output(fd.ops.sub(g, fd.ops.broadcast(mean, [False, False, True])))
        fd.add_output(fd.ops.sum(fd.ops.mul(x, g), dims=[0, 1]))
    rng = np.random.default_rng(2)
    x, g = (rng.standard_normal((3, 11, 40)).astype(np.float32) for _ in range(2))
    check(fd, [x, g])


def test_declines_column_results_used_by_the_rows() -> None:
    """A column sum that the rows read again is not a column side: segmented instead."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        cols = fd.ops.sum(x, dims=[0])
        y = fd.ops.sub(x, fd.ops.broadcast(cols, [True, False]))
        fd.add_output(fd.ops.sum(y, dims=[1]))
    x = np.random.default_rng(3).standard_normal((6, 10)).astype(np.float32)
    assert IO not in schedule.find_compatible_schedulers(fd.fusion, [x])
    segments = fd.segments([x])
    assert len(segments) > 1
    assert all(s.scheduler is not IO for s in segments)
    out = fd.execute([x])
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x]), [x])


@pytest.mark.parametrize("shape", [(1, 1), (5, 64), (300, 40), (64, 1024)])
def test_column_reductions_of_one_input_each_get_their_accumulator(
    shape: tuple[int, int],
) -> None:
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    check(shared_column_input(), [x])


@pytest.mark.parametrize("shape", [(1, 1), (37, 300)])
def test_declines_a_column_input_broadcast_along_the_columns(shape: tuple[int, int]) -> None:
    """Found by a GPU campaign (a kfuse error: the kernel named a column output it never
    declared): a row sum of a column sum broadcast back is no column side, since its columns
    would be one where the rows have many."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        cols = fd.ops.sum(x, dims=[0])
        back = fd.ops.broadcast(cols, [True, False])
        fd.add_output(fd.ops.exp(x))
        fd.add_output(back)
        fd.add_output(fd.ops.sum(fd.ops.log(fd.ops.add(fd.ops.abs(back), 0.5)), dims=[1]))
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    assert IO not in schedule.find_compatible_schedulers(fd.fusion, [x])
    out = fd.execute([x])
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x]), [x])


def test_pinned_params_it_cannot_run_are_errors() -> None:
    fd = rms_norm_backward()
    inputs = rms_norm_backward_inputs(4, 64)
    params = schedule.compute_heuristics(fd.fusion, IO, inputs)
    params.reload_batch_size = 1
    with pytest.raises(SchedulerError, match="reload_batch_size"):
        fd.manual_execute(inputs, heuristic_params=params)
    params = schedule.compute_heuristics(fd.fusion, IO, inputs)
    params.persistent_batch_size = 1
    params.block_x = 2
    with pytest.raises(SchedulerError, match="fewer than the row"):
        fd.manual_execute(inputs, heuristic_params=params)


def test_many_held_inputs_are_held_in_shared_memory() -> None:
    """Five row inputs (a dropout's backward) of 4096 are too many to hold in registers (at
    most HELD_WORDS_TARGET registers a thread leaves one vector a thread, 512 threads a row):
    the row kernel holds them in shared memory instead of leaving the fusion to segments."""
    with FusionDefinition() as fd:
        ins = [fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16) for _ in range(5)]
        x1, x2, keep, g, w = (fd.ops.cast(t, DataType.Float) for t in ins)
        x = fd.ops.add(x2, fd.ops.mul(fd.ops.mul(x1, keep), 1.25))
        row = fd.ops.sum(fd.ops.mul(fd.ops.mul(g, w), x), dims=[1])
        dx = fd.ops.sub(fd.ops.mul(g, w), fd.ops.mul(x, fd.ops.broadcast(row, [False, True])))
        fd.add_output(fd.ops.cast(fd.ops.mul(dx, keep), DataType.BFloat16))
        fd.add_output(fd.ops.sum(fd.ops.mul(g, x), dims=[0]))
    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal((6, 4096)).astype(BF16) for _ in range(5)]
    check(fd, inputs)
    params = fd.last_program().params
    assert params.smem_persistent
    # Spread over a whole block of threads (two vectors each), not 64 threads a row with 8:
    # the block's column accumulators leave few rows an SM (inner_outer's docstring).
    assert (params.block_x, params.persistent_batch_size, params.block_y) == (256, 2, 1)


@pytest.mark.parametrize("backward", ["rms", "layer"])
def test_no_more_blocks_than_the_launch_bound_keeps_resident(backward: str) -> None:
    """The grid is the blocks an SM that __launch_bounds__ guarantees (3 of 256 threads),
    times the SMs: blocks past those start only when a first one has done all its rows (an
    H200 ran the RMS norm backward's 528 blocks 396 at once, the last 132 alone)."""
    from kfuse.codegen import column_partials
    from kfuse.runtime.device import get_profile
    from kfuse.schedule.registry import scheduler_for

    # The inputs' shapes only: making 16384 x 4096 inputs took seconds of CPU.
    fd, info = norm_backward_on_h200(backward, 16384, 4096)
    scheduler = scheduler_for(IO)
    assert schedule.rejection_reason(scheduler, fd.fusion, info) is None
    hp = scheduler.heuristics(fd.fusion, info)
    assert not hp.smem_persistent and hp.block_x * hp.block_y == 256
    bound = 65536 // (column_partials.REGISTER_TARGET * 256)
    assert bound == 3
    assert hp.grid_x == get_profile("h200").sm_count * bound


@pytest.mark.parametrize(
    ("backward", "n", "h", "in_registers"),
    [
        ("rms", 32768, 1024, True),  # 2 vectors of 8 columns, one column sum: 16 words
        ("layer", 32768, 1024, True),  # two column sums: 32 words (REGISTER_WORDS)
        ("layer", 16384, 4096, True),
        ("rms", 8192, 8192, False),  # the row is held in shared memory
    ],
)
def test_short_rows_keep_their_column_partials_in_registers(
    backward: str, n: int, h: int, in_registers: bool
) -> None:
    """Column accumulators of at most REGISTER_WORDS a thread are registers until the last
    row (on an H200 the layer norm backward of [16384, 4096] bf16 took 136.0 us so, 144.6 us
    adding every row's values to shared memory); a row held in shared memory keeps them
    there. Both are right (the other tests of this file run the register path at their
    small sizes, test_rows_held_in_shared_memory the shared one)."""
    from kfuse.codegen import column_partials
    from kfuse.schedule.registry import scheduler_for

    fd, info = norm_backward_on_h200(backward, n, h)
    scheduler = scheduler_for(IO)
    params = scheduler.heuristics(fd.fusion, info)
    main = scheduler.kernels(fd.fusion, info, params)[0]
    assert main.spec.columns_in_registers is in_registers
    assert column_partials.fit_in_registers(main.spec) is in_registers
    assert main.name.endswith("_reg") is in_registers
    assert ("float cr0[" in main.source) is in_registers


@pytest.mark.parametrize(("backward", "n", "h"), [("rms", 8192, 8192), ("layer", 16384, 4096)])
def test_dynamic_shared_memory_starts_on_a_128_byte_line(backward: str, n: int, h: int) -> None:
    """The held rows and column accumulators (dynamic shared memory) start on a 128-byte
    line: declared so, and the static scratch before them a multiple of 128 bytes, so that the
    compiler adds no padding the schedulers' sums leave out. A scratch of a slot a
    warp (64 bytes) put them 64 bytes past one, and an H200 ran the RMS norm backward [8192,
    8192] 8% slower (codegen.reduction_loads.DYNAMIC_SMEM_ALIGN)."""
    from kfuse.schedule.registry import scheduler_for

    fd, info = norm_backward_on_h200(backward, n, h)
    scheduler = scheduler_for(IO)
    main = scheduler.kernels(fd.fusion, info, scheduler.heuristics(fd.fusion, info))[0]
    assert "extern __shared__ __align__(128) unsigned char kf_held[];" in main.source
    static = [int(m) for m in re.findall(r"__shared__ [^;]*\[(\d+)\];", main.source)]
    assert len(static) == 1 and static[0] % 128 == 0


@pytest.mark.parametrize(
    ("backward", "n", "h", "in_smem"),
    [
        ("layer", 2048, 16384, False),  # 512 threads of 4 vectors: 48 words, one block an SM
        ("rms", 2048, 16384, False),
        ("rms", 8192, 8192, True),  # in shared memory two blocks an SM run
        ("layer", 8192, 8192, True),
    ],
)
def test_rows_of_one_block_an_sm_held_in_registers(
    backward: str, n: int, h: int, in_smem: bool
) -> None:
    """A row whose shared-memory layout leaves one block an SM (its column sums take the rest)
    is held in registers by the same threads where that takes at most ROW_REGISTER_WORDS
    (an H200 ran the layer norm backward [2048, 16384] in 77.4 us so, 90.1 in shared
    memory); where shared memory runs two blocks an SM it stays there (RMS norm backward
    [8192, 8192] 110.5 us, 134.1 in registers)."""
    from kfuse.schedule.registry import scheduler_for

    fd, info = norm_backward_on_h200(backward, n, h)
    params = scheduler_for(IO).heuristics(fd.fusion, info)
    assert (params.block_x, params.persistent_batch_size) == (512, h // 512 // 8)
    assert params.smem_persistent is in_smem
    assert params.grid_x == 132 * (2 if in_smem else 1)


@pytest.mark.parametrize("block_y", [1, 2])
def test_rows_in_registers_with_column_sums_in_shared_memory(block_y: int) -> None:
    """Rows in registers whose column sums take more than REGISTER_WORDS a thread (64 here)
    keep the column sums in shared memory, as the long rows of one block an SM do."""
    from kfuse.codegen import column_partials

    fd = layer_norm_backward()
    inputs = layer_norm_backward_inputs(37, 2048)
    params = schedule.compute_heuristics(fd.fusion, IO, inputs)
    params.smem_persistent = False
    params.block_x, params.persistent_batch_size, params.block_y = 64, 4, block_y
    params.grid_x = 5
    assert 4 * params.vectorize_reduction * 2 > column_partials.REGISTER_WORDS
    check(fd, inputs, params)
