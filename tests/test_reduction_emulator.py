"""The reduction scheduler end to end on the host emulator: fd.execute on NumPy / CPU torch
inputs against kfuse.reference, for inner, outer, multi-axis and grid reductions."""

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest

from kfuse import schedule
from kfuse.dtypes import DataType
from kfuse.errors import SchedulerError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close


def rand(shape: tuple[int, ...], dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-50, 50, size=shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.standard_normal(shape).astype(dtype)


def check(
    fd: FusionDefinition,
    inputs: list,
    params: object = None,
    scheduler: SchedulerType = SchedulerType.reduction,
) -> list:
    if params is None:
        out = fd.execute(inputs)
        assert fd.last_scheduler() is scheduler
    else:
        out = fd.manual_execute(inputs, heuristic_params=params)
    assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)
    return out


def reduce_fd(
    op: str,
    dims: list[int],
    rank: int = 2,
    dtype: DataType = DataType.Float,
    keepdim: bool = False,
    **kw: object,
) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, dtype=dtype)
        fd.add_output(getattr(fd.ops, op)(x, dims, keepdim=keepdim, **kw))
    return fd


@pytest.mark.parametrize(
    "shape,dims",
    [
        ((5, 37), [1]),
        ((37, 5), [0]),
        ((3, 4, 33), [1, 2]),
        ((6, 5, 4), [0, 1]),
        ((4, 6, 5), [1]),
        ((1000,), [0]),
        ((2, 3, 4), [0, 1, 2]),
    ],
)
def test_sum_inner_outer_and_multi_axis(shape: tuple, dims: list) -> None:
    fd = reduce_fd("sum", dims, rank=len(shape))
    check(fd, [rand(shape)])


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean"])
@pytest.mark.parametrize("dim", [0, 1])
def test_every_op_both_directions(op: str, dim: int) -> None:
    x = rand((9, 70)) if dim else rand((70, 9))
    if op == "prod":
        x = (1.0 + 0.01 * x).astype(np.float32)
    check(reduce_fd(op, [dim]), [x])


@pytest.mark.parametrize(
    "dtype,np_dtype",
    [
        (DataType.Float, np.float32),
        (DataType.Double, np.float64),
        (DataType.Half, np.float16),
        (DataType.Int32, np.int32),
        (DataType.Int, np.int64),
        (DataType.Bool, np.bool_),
    ],
)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_every_dtype(dtype: DataType, np_dtype: type, op: str) -> None:
    fd = reduce_fd(op, [1], dtype=dtype)
    x = rand((6, 45), np_dtype)
    out = check(fd, [x])
    if op == "sum" and not dtype.is_floating:
        assert out[0].dtype == np.int64  # ints and bools sum in int64


def test_sum_with_wider_accumulate_dtype_from_bf16() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        fd.add_output(fd.ops.sum(x, [1], dtype=DataType.Float))
    out = check(fd, [rand((4, 300), ml_dtypes.bfloat16)])
    assert out[0].dtype == np.float32


def test_keepdim_prologue_epilogue_and_input_broadcast() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1])  # broadcast along rows in the prologue
        c = fd.define_tensor(shape=[-1, 1])  # read per output in the epilogue
        s = fd.define_scalar(dtype=DataType.Double)
        y = fd.ops.relu(x * 2.0 + b)
        r = fd.ops.sum(y, [1], keepdim=True)
        fd.add_output(fd.ops.tanh(r * s + c))
        fd.add_output(fd.ops.max(y, [1]))
    check(fd, [rand((7, 50)), rand((50,), seed=1), rand((7, 1), seed=2), 0.25])


def test_var_mean_welford_and_count() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
        v, m = fd.ops.var_mean(x, [0], correction=1)
        fd.add_output(v)
        fd.add_output(m)
        avg, m2, n = fd.ops.welford(fd.ops.cast(x, DataType.Float), [0])
        fd.add_output(n)
    check(fd, [rand((33, 10), np.float16)])
    check(fd, [rand((5, 70), np.float16)])


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean", "var"])
def test_empty_reduction_gives_the_identity(op: str) -> None:
    fd = reduce_fd(op, [1])
    x = np.zeros((3, 0), np.float32)
    out = check(fd, [x])
    expected = {"sum": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}
    if op in expected:
        assert (out[0] == expected[op]).all()
    else:
        assert np.isnan(out[0]).all()


@pytest.mark.parametrize("shape,dim", [((4, 1), 1), ((1, 4), 0), ((1, 1), 0), ((1, 7), 1)])
def test_extent_one(shape: tuple, dim: int) -> None:
    check(reduce_fd("sum", [dim]), [rand(shape)])


@pytest.mark.parametrize("op", ["max", "min"])
def test_nan_propagates_through_max_and_min(op: str) -> None:
    x = rand((4, 40))
    x[1, 17] = np.nan
    x[3, 39] = np.nan
    out = check(reduce_fd(op, [1]), [x])
    assert np.isnan(out[0][[1, 3]]).all() and not np.isnan(out[0][[0, 2]]).any()
    xt = np.ascontiguousarray(x.T)
    out = check(reduce_fd(op, [0]), [xt])
    assert np.isnan(out[0][[1, 3]]).all()


def test_non_contiguous_and_transposed_inputs() -> None:
    base = rand((40, 30))
    check(reduce_fd("sum", [1]), [base.T])  # reduced axis strided: the outer kernel
    check(reduce_fd("sum", [1]), [base[::2, ::3]])
    check(reduce_fd("sum", [0]), [base[:, 1:]])  # misaligned rows: no vectors


def test_torch_cpu_inputs() -> None:
    torch = pytest.importorskip("torch")
    fd = reduce_fd("sum", [1], dtype=DataType.BFloat16)
    x = torch.randn(5, 66, dtype=torch.bfloat16)
    out = fd.execute([x])
    assert out[0].dtype == torch.bfloat16
    assert_outputs_close(fd, out, evaluate(fd.fusion, [x]), [x])


def test_grid_reduction_paths_are_taken_for_few_outputs() -> None:
    fd = reduce_fd("sum", [1])
    x = rand((1, 1 << 14))
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, [x])
    assert hp.fastest_dim_reduction and hp.grid_y > 1 and hp.cross_grid_count == hp.grid_y
    check(fd, [x])
    assert "_fin" in fd.last_cuda_source()
    fd0 = reduce_fd("sum", [0])
    xt = rand((4096, 3))
    hp = schedule.compute_heuristics(fd0.fusion, SchedulerType.reduction, [xt])
    assert not hp.fastest_dim_reduction and hp.grid_y > 1
    check(fd0, [xt])


def _grid_sweep() -> list:
    """Every (op, kept, parts). The quick run takes sum at every size, max at (70, 37) (more
    than one load batch and finalize block) and var (a Welford's finalize) there and at the
    most threads sharing a kept element; the rest is CI's extended step (each case compiles
    two kernels of its own)."""
    cases = []
    for op in ["sum", "max", "var"]:
        for kept, parts in [(6, 5), (70, 37), (40, 130), (33, 300)]:
            quick = op == "sum" or (kept, parts) == (70, 37) or (op, parts) == ("var", 300)
            marks = () if quick else (pytest.mark.extended,)
            cases.append(pytest.param(op, kept, parts, marks=marks))
    return cases


@pytest.mark.parametrize("inner", [True, False])
@pytest.mark.parametrize(("op", "kept", "parts"), _grid_sweep())
def test_forced_grid_reduction_with_manual_params(
    inner: bool, op: str, kept: int, parts: int
) -> None:
    # 37 partials: more than one load batch of each finalize thread, and not a multiple of
    # the threads sharing a kept element; 70 kept elements: more than one finalize block;
    # 130 and 300 partials: more threads share each kept element (16, 32: 1024 a block).
    fd = reduce_fd(op, [1 if inner else 0])
    x = rand((kept, 301)) if inner else rand((301, kept))
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, [x])
    hp.grid_y = parts
    hp.block_x, hp.block_y = (32, 2) if inner else (4, 8)
    check(fd, [x], hp)


@pytest.mark.parametrize(
    "edit",
    [
        {"block_x": 8, "block_y": 4},
        {"block_x": 48, "block_y": 1},
        {"vectorize_reduction": 1},
        {"vectorize_reduction": 2, "unroll_reduction": 3},
        {"grid_x": 1},
        {"block_x": 1},
    ],
)
def test_edited_inner_params_stay_correct(edit: dict) -> None:
    fd = reduce_fd("sum", [1])
    x = rand((9, 203))
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, [x])
    for k, v in edit.items():
        setattr(hp, k, v)
    check(fd, [x], hp)


@pytest.mark.parametrize(
    "edit",
    [
        {"block_x": 3, "block_y": 5},
        {"vectorize_iter": 2},
        {"vectorize_iter": 1},
        {"unroll_reduction": 1, "block_y": 1},
        {"grid_x": 1, "block_x": 2},
    ],
)
def test_edited_outer_params_stay_correct(edit: dict) -> None:
    fd = reduce_fd("max", [0])
    x = rand((77, 36))
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, [x])
    assert not hp.fastest_dim_reduction
    for k, v in edit.items():
        setattr(hp, k, v)
    check(fd, [x], hp)


def _rows_left_cross() -> list:
    """Every (op, unroll, threads). The README's command runs the sum at every unroll in both
    thread layouts and the var (a Welford's rows) at the odd unroll, 5, in both; the var at
    8 and 2 is CI's extended step."""
    return [
        pytest.param(
            *layout,
            unroll,
            op,
            marks=() if op == "sum" or unroll == 5 else pytest.mark.extended,
        )
        for layout in [(4, 2, True), (1, 1, False)]
        for unroll in [8, 5, 2]
        for op in ["sum", "var"]
    ]


@pytest.mark.parametrize(("block_y", "grid_y", "tail", "unroll", "op"), _rows_left_cross())
def test_outer_rows_left_after_the_unrolled_loop(
    op: str, unroll: int, block_y: int, grid_y: int, tail: bool
) -> None:
    # Each thread takes rows r, r + block_y * grid_y, ...: the n_red below leave the threads
    # 0 to unroll - 1 rows after their whole batches. Threads with few batches (block_y 4,
    # grid_y 2: one) take those rows in batches of halving powers of two; threads with many
    # (block_y 1, grid_y 1: eight) one at a time. A row skipped or taken twice shows.
    fd = reduce_fd(op, [0])
    threads = block_y * grid_y
    first = (1 if tail else 8) * unroll * threads
    for n_red in range(first, first + unroll * threads):
        x = rand((n_red, 12), seed=n_red)
        hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, [x])
        assert not hp.fastest_dim_reduction
        hp.block_x, hp.block_y, hp.grid_y, hp.unroll_reduction = 4, block_y, grid_y, unroll
        check(fd, [x], hp)
        halving = "if (r < n_red)" in fd.last_cuda_source()
        assert halving == (tail and unroll > 1)


def test_switching_direction_by_params_stays_correct() -> None:
    fd = reduce_fd("sum", [1])
    x = rand((20, 24))
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, [x])
    hp.fastest_dim_reduction = False
    hp.vectorize_iter = 1
    check(fd, [x], hp)


@pytest.mark.parametrize(
    "edit,message",
    [
        ({"block_x": 64, "block_y": 32}, "threads"),
        ({"vectorize_reduction": 3}, "vector"),
        ({"grid_y": 70000}, "grid"),
        ({"persistent": True}, "persistent"),
        ({"unroll_iter": 2}, "unroll_iter"),
    ],
)
def test_impossible_params_raise_scheduler_error(edit: dict, message: str) -> None:
    fd = reduce_fd("sum", [1])
    x = rand((4, 40))
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, [x])
    for k, v in edit.items():
        setattr(hp, k, v)
    with pytest.raises(SchedulerError, match=message):
        fd.manual_execute([x], heuristic_params=hp)


def _column_epilogue_fd(n_red_dims: int = 1) -> FusionDefinition:
    """A sum over the leading axis, then per-column math with a row input (a bias over the
    kept axis) and a scalar: the outer kernel's epilogue, with its outputs in bf16 and f32."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.BFloat16)
        bias = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        s = fd.ops.sum(fd.ops.cast(x, DataType.Float), [0])
        y = fd.ops.mul(fd.ops.add(s, bias), 0.5)
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
        fd.add_output(y)
    return fd


def _epilogue_cross() -> list:
    """Every (columns, n_red). The README's command runs both column counts with one batch of
    one thread (n_red 3 and 8) and with threads along the reduced axis (9 and 40); n_red 2,
    and 3 and 9 of the other column count, are CI's extended step (a kernel each)."""
    quick = {(64, 3), (64, 40), (36, 8), (36, 9)}
    return [
        pytest.param(
            columns, n_red, marks=() if (columns, n_red) in quick else pytest.mark.extended
        )
        for columns in [64, 36]
        for n_red in [2, 3, 8, 9, 40]
    ]


@pytest.mark.parametrize(("columns", "n_red"), _epilogue_cross())
def test_outer_epilogue_stores_whole_column_groups_as_vectors(n_red: int, columns: int) -> None:
    """The outer kernel finds a thread's group of V consecutive columns once and stores its
    row outputs as one vector each (each column's index was decomposed and its element
    stored alone). 36 columns: vectors of 4, 9 groups a row of the kept [5, 36]; the
    groups cut by the kept axis' end take the column-by-column path (forced vector 8)."""
    fd = _column_epilogue_fd()
    x = rand((n_red, 5, columns), ml_dtypes.bfloat16, seed=n_red)
    bias = rand((5, columns), seed=1)
    out = check(fd, [x, bias])
    source = fd.last_cuda_source()
    assert "kf::store_vec<" in source and "(out0, base_out0, v0)" in source
    if n_red <= 8:  # one batch of one thread: no threads along the reduced axis
        hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, [x, bias])
        assert (hp.block_y, hp.unroll_reduction) == (1, n_red)
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, [x, bias])
    hp.vectorize_iter = 8  # 36 = 4 whole groups and one of 4 columns a row
    again = check(fd, [x, bias], hp)
    for a, b in zip(out, again):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_direction_follows_the_bytes_each_operand_moves() -> None:
    """A bf16 tensor contiguous along the reduced axis, scaled by a float per row (stride 1
    along the kept axis), reduces along its rows: counted by element size the per-row
    factor outweighed it, and the kernel walked the big tensor across its rows. RoPE's sum
    over pairs goes the other way: q, contiguous along a kept axis, outweighs its table."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        wb = fd.ops.broadcast_in_dim(w, shape=fd.ops.shape(x), broadcast_dims=[0])
        fd.add_output(fd.ops.sum(fd.ops.mul(fd.ops.cast(x, DataType.Float), wb), [1]))
    inputs = [rand((6, 300), ml_dtypes.bfloat16), rand((6,))]
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, inputs)
    assert hp.fastest_dim_reduction
    check(fd, inputs)
    with FusionDefinition() as fd:
        q = fd.define_tensor(shape=[-1, -1, -1])
        t = fd.define_tensor(shape=[-1, -1])
        pairs = fd.ops.permute(q, dims=[0, 2, 1])  # [rows, features, 2]
        tb = fd.ops.broadcast_in_dim(t, shape=fd.ops.shape(pairs), broadcast_dims=[1, 2])
        fd.add_output(fd.ops.sum(fd.ops.mul(pairs, tb), [2]))
    inputs = [rand((40, 2, 64)), rand((64, 2))]
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, inputs)
    assert not hp.fastest_dim_reduction
    check(fd, inputs)


@pytest.mark.parametrize("pairs", [2, 4])
def test_rows_adjacent_in_each_column_load_as_one_block(pairs: int) -> None:
    """An outer reduction whose threads take all its rows in one batch reads an operand
    whose rows are adjacent in each column (a RoPE cos/sin table, [features, pair]) as one
    vector of its V columns' rows, spread in registers; q, contiguous along the columns,
    as vectors a row. Against the reference; a table laid out the other way round
    ([pair, features]) is read as vectors a row too, not as one block."""
    with FusionDefinition() as fd:
        q = fd.define_tensor(shape=[-1, -1, -1])
        t = fd.define_tensor(shape=[-1, -1])
        rows = fd.ops.permute(q, dims=[0, 2, 1])  # [rows, features, pair]
        tb = fd.ops.broadcast_in_dim(t, shape=fd.ops.shape(rows), broadcast_dims=[1, 2])
        fd.add_output(fd.ops.sum(fd.ops.mul(rows, tb), [2]))
    inputs = [rand((24, pairs, 64)), rand((64, pairs), seed=1)]
    check(fd, inputs)
    source = fd.last_cuda_source()
    vector = int(re.search(r"const Index nvec_in = \(n_in \+ \d+\) / (\d+);", source)[1])
    assert f"kf::load_vec<{vector * pairs}>(in1, base_in1 + r)" in source
    # 32 bytes of each operand a thread where its rows fit SHORT_OUTER_LOAD_WORDS registers
    # (2 rows x 8 x 2 float32 operands: 32 words), else 16 (4 rows would take 64).
    assert vector == (8 if pairs == 2 else 4)
    apart = [inputs[0], np.ascontiguousarray(inputs[1].T).T]  # the same values, [pair, features]
    check(fd, apart)
    assert "xb1" not in fd.last_cuda_source()


@pytest.mark.parametrize("columns", [16, 6, 13])  # whole vectors, and column groups cut
@pytest.mark.parametrize("transposed_mean", [False, True])  # VEC, and STRIDED along the columns
def test_an_input_constant_along_the_reduced_rows_is_loaded_once(
    columns: int, transposed_mean: bool
) -> None:
    """sum over rows of (x - mean) * dy with the mean the same for every row (an instance norm
    backward's statistics): the outer kernel loads the mean's vector once for all its rows
    (xc<i>; the kernel's name says which input: _vcv), with the reference's results, also
    for the rows left after the unrolled batches and for column groups cut by the end of
    the columns."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        dy = fd.define_tensor(shape=[-1, -1])
        mean = fd.define_tensor(shape=[-1])
        centered = fd.ops.sub(x, fd.ops.broadcast(mean, [True, False]))
        fd.add_output(fd.ops.sum(fd.ops.mul(centered, dy), [0]))
    rows = 77
    mean = rand((columns, 2), seed=3)[:, 0] if transposed_mean else rand((columns,), seed=3)
    inputs = [rand((rows, columns)), rand((rows, columns), seed=1), mean]
    check(fd, inputs)
    source = fd.last_cuda_source()
    found = re.search(r"kfuse_outer_[0-9a-f]+_([vc]{3})\b", source)
    assert found and sorted(found.group(1)) == ["c", "v", "v"]
    assert f"xc{found.group(1).index('c')}[0]" in source


@pytest.mark.parametrize(("rows", "one_thread"), [(49, True), (64, True), (65, False)])
def test_short_welford_outer_reductions_take_a_column_in_one_thread(
    monkeypatch: pytest.MonkeyPatch, rows: int, one_thread: bool
) -> None:
    """var_mean over the middle axis of [N, rows, C] (an NHWC instance norm's statistics)
    with enough column groups for a block of 256 every SM: up to OUTER_ROWS_ONE_THREAD
    rows, each thread takes all of its columns' rows (block_y 1, no combine of Welford
    states through shared memory); longer ones keep rows of threads. Against the reference
    on the emulator, with the H200's SM count."""
    from kfuse.schedule import reduction_heuristics

    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1])
        var, mean = fd.ops.var_mean(x, dims=[1], correction=0)
        fd.add_output(var)
        fd.add_output(mean)
    columns = 132 * 256 * 4 // 16  # 132 x 256 column groups of 4 in 16 batches
    inputs = [rand((16, rows, columns), seed=2) + 3]
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.reduction, inputs)
    assert not hp.fastest_dim_reduction
    assert (hp.block_y == 1) is one_thread
    assert rows > reduction_heuristics.SHORT_OUTER_ROWS  # not the short-rows rule's case
    check(fd, inputs)
