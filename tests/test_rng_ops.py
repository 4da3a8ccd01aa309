"""Random-number ops (fd.ops.uniform, normal, rand_like, randn_like): nvFuser's RNG tests
ported, a dropout against the NumPy reference bit for bit, the same numbers from every
schedule and across segments, stateful draws against stateless ones, the generated source,
the definition errors, and GPU = emulator."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

import kfuse
from kfuse import DataType, FusionDefinition
from kfuse.errors import DefinitionError, InputError
from kfuse.ir.printer import fusion_to_python
from kfuse.reference import evaluate
from kfuse.reference import philox as ref

pytestmark = pytest.mark.usefixtures("module_private_cache")

RANDOM_DTYPES = [DataType.Float, DataType.Double, DataType.Half, DataType.BFloat16]


def _bits(a: Any) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _same(got: Any, want: Any) -> None:
    """Equal bit for bit (NaN included), dtypes and shapes too."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert (_bits(got) == _bits(want)).all()


def _rebuilt(fd: FusionDefinition) -> FusionDefinition:
    scope: dict[str, Any] = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(fusion_to_python(fd.fusion), scope)
    return scope["fd"]


def _dropout(p: float, *, stateless: bool, dtype: DataType = DataType.Float) -> FusionDefinition:
    """where(uniform(0, 1, x.shape) < p, x / p, 0) and the mask's numbers (p: kept)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        seeds: dict[str, Any] = {}
        if stateless:
            seeds = {
                "rng_seed": fd.define_scalar(None, dtype=DataType.Int),
                "rng_offset": fd.define_scalar(None, dtype=DataType.Int),
            }
        u = fd.ops.uniform(0.0, 1.0, fd.ops.shape(x), **seeds)
        y = fd.ops.where(fd.ops.lt(u, p), fd.ops.div(x, p), 0.0)
        fd.add_output(fd.ops.cast(y, dtype))
        fd.add_output(u)
    return fd


# ---- nvFuser's tests ----


@pytest.mark.parametrize("op", ["uniform", "normal"])
def test_deterministic_random(op: str) -> None:
    # nvFuser's test_deterministic_random, with kfuse's generator (NumPy inputs): after a
    # manual seed, the i-th stateful run is the stateless run at rng_offset=i.
    x = np.random.default_rng(0).standard_normal((5, 9)).astype(np.float32)

    def define(deterministic: bool) -> FusionDefinition:
        with FusionDefinition() as fd:
            t1 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
            a = fd.define_scalar(0.3, dtype=DataType.Float)
            b = fd.define_scalar(1.7, dtype=DataType.Float)
            rand_op = getattr(fd.ops, op)
            if deterministic:
                rng_seed = fd.define_scalar(None, dtype=DataType.Int)
                rng_offset = fd.define_scalar(None, dtype=DataType.Int)
                u = rand_op(a, b, shape=[5, 9], rng_seed=rng_seed, rng_offset=rng_offset)
            else:
                u = rand_op(a, b, shape=[5, 9])
            fd.add_output(fd.ops.mul(t1, u))
        return fd

    fd_stoch, fd_det = define(False), define(True)
    for seed in (0, 12345, 2**63 - 1):
        kfuse.manual_seed(seed)
        stateful = [fd_stoch.execute([x])[0] for _ in range(10)]
        stateless = [fd_det.execute([x, seed, offset])[0] for offset in range(10)]
        for sful, sless in zip(stateful, stateless, strict=True):
            _same(sful, sless)
        assert not np.array_equal(stateful[0], stateful[1])
    # the stateless numbers are the NumPy reference's
    draw = ref.uniform if op == "uniform" else ref.normal
    u = draw(7, 3, (5, 9), DataType.Float, 0.3, 1.7)
    _same(fd_det.execute([x, 7, 3])[0], x * u)


@pytest.mark.parametrize("dtype", RANDOM_DTYPES)
@pytest.mark.parametrize(("left", "right"), [(0.0, 1.0), (-1.5, 3.7)])
def test_uniform_range(dtype: DataType, left: float, right: float) -> None:
    # nvFuser's test_uniform_range at an emulator's scale (2^18 samples, 4 runs): every value
    # in [left, max below right]; the mean within the standard error; Half and BFloat16, whose
    # ends are likely enough, reach both.
    samples, runs = 1 << 18, 4
    with FusionDefinition() as fd:
        a = fd.define_scalar(left, dtype=DataType.Double)
        b = fd.define_scalar(right, dtype=DataType.Double)
        fd.add_output(fd.ops.uniform(a, b, shape=[samples], dtype=dtype))
    kfuse.manual_seed(2024)
    outs = [fd.execute([])[0].astype(np.float64) for _ in range(runs)]
    values = np.concatenate(outs)
    np_dtype = fd.fusion.outputs[0].dtype
    storage = kfuse.dtypes.to_numpy_dtype(np_dtype)
    theomin = float(np.asarray(left).astype(storage))
    theomax = float(np.nextafter(np.asarray(right, storage), np.asarray(left, storage)))
    assert values.min() >= theomin and values.max() <= theomax
    n = values.size
    tolerance = (right - left) * max(right - values.max(), 3.0 / math.sqrt(12 * n))
    assert abs(values.mean() - 0.5 * (left + right)) < tolerance
    if dtype in (DataType.Half, DataType.BFloat16):
        assert values.min() == theomin and values.max() == theomax


def test_normal_mean_and_std() -> None:
    # nvFuser's test_normal (its [64, 128, 1024] at an emulator's [16, 32, 256]).
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.Float)
        s_mean, s_std = fd.define_scalar(3.7), fd.define_scalar(2.5)
        fd.add_output(fd.ops.normal(s_mean, s_std, fd.ops.shape(t0), dtype=DataType.Double))
    (out,) = fd.execute([np.zeros((16, 32, 256), np.float32)])
    assert out.dtype == np.float64
    assert math.isclose(out.mean(), 3.7, rel_tol=1e-2, abs_tol=1e-2)
    assert math.isclose(out.std(), 2.5, rel_tol=1e-2, abs_tol=1e-2)


def test_uniform_mean_min_and_max() -> None:
    # nvFuser's test_uniform at an emulator's size.
    lo, hi = 1.8, 1223.5
    with FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.Float)
        fd.add_output(
            fd.ops.uniform(
                fd.define_scalar(lo), fd.define_scalar(hi), fd.ops.shape(t0), dtype=DataType.Double
            )
        )
    (out,) = fd.execute([np.zeros((16, 32, 256), np.float32)])
    assert math.isclose(out.mean(), (lo + hi) / 2, rel_tol=1e-2, abs_tol=1e-2)
    assert math.isclose(out.min(), lo, rel_tol=1e-2, abs_tol=1e-2)
    assert math.isclose(out.max(), hi, rel_tol=1e-2, abs_tol=1e-2)
    assert lo <= out.min() and out.max() < hi


@pytest.mark.parametrize("op", ["uniform", "normal"])
@pytest.mark.parametrize("dtype", RANDOM_DTYPES)
def test_random_distinct_values(op: str, dtype: DataType) -> None:
    # nvFuser's test_random_distinct_values: four values of a stateful op, drawn 100 times,
    # never have three equal pairs.
    with FusionDefinition() as fd:
        s0 = fd.define_scalar(0.0, dtype=DataType.Double)
        s1 = fd.define_scalar(1.0, dtype=DataType.Double)
        fd.add_output(getattr(fd.ops, op)(s0, s1, shape=[2, 2], dtype=dtype))
    kfuse.manual_seed(11)
    draws = []
    for _ in range(100):
        values = fd.execute([])[0].astype(np.float64).reshape(-1)
        match_pairs = ((values[None, :] == values[:, None]).sum() - 4) // 2
        assert match_pairs < 3, values
        draws.append(values)
    assert len({tuple(d) for d in draws}) == 100  # every launch drew anew


# ---- the numbers ----


@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Half, DataType.BFloat16])
def test_dropout_equals_the_numpy_reference(dtype: DataType) -> None:
    fd = _dropout(0.8, stateless=True, dtype=dtype)
    storage = kfuse.dtypes.to_numpy_dtype(dtype)
    x = np.random.default_rng(1).standard_normal((67, 301)).astype(storage)
    y, u = fd.execute([x, 99, 5])
    mask = ref.uniform(99, 5, x.shape, DataType.Float)
    _same(u, mask)
    for got, want in zip((y, u), evaluate(fd, [x, 99, 5], accumulate="same"), strict=True):
        _same(got, want)
    kept = mask < np.float32(0.8)
    assert 0.78 < kept.mean() < 0.82
    assert (y[~kept] == 0).all()


@pytest.mark.parametrize("op", ["uniform", "normal"])
@pytest.mark.parametrize("dtype", RANDOM_DTYPES)
def test_general_parameters_and_dtypes_match_the_reference(op: str, dtype: DataType) -> None:
    with FusionDefinition() as fd:
        a = fd.define_scalar(None, dtype=DataType.Double)
        b = fd.define_scalar(None, dtype=DataType.Double)
        n = fd.define_scalar(None, dtype=DataType.Int)
        seed = fd.define_scalar(None, dtype=DataType.Int)
        offset = fd.define_scalar(None, dtype=DataType.Int)
        draw = getattr(fd.ops, op)
        fd.add_output(draw(a, b, [3, n], rng_seed=seed, rng_offset=offset, dtype=dtype))
    args = [-0.5, 2.25, 1001, -3, 1 << 40]
    got = fd.execute(args)[0]
    want = ref.generated_values(op, (3, 1001), [-0.5, 2.25, -3, 1 << 40], dtype)
    _same(got, want)
    _same(_rebuilt(fd).execute(args)[0], want)


def _uniform_seen_through(x_dtype: DataType, shape: tuple[int, ...], view: str) -> np.ndarray:
    """uniform(shape) at seed 11, offset 2, as a fusion that also reads an x of `x_dtype`
    (its vector width) and outputs it plain, permuted, or broadcast against x."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * len(shape), dtype=x_dtype)
        u = fd.ops.uniform(0.0, 1.0, list(shape), rng_seed=11, rng_offset=2)
        if view == "permuted":
            perm = list(range(len(shape)))[::-1]
            fd.add_output(fd.ops.permute(u, perm))
            fd.add_output(fd.ops.add(fd.ops.cast(x, DataType.Float), fd.ops.permute(u, perm)))
        else:
            fd.add_output(u)
            fd.add_output(fd.ops.add(fd.ops.cast(x, DataType.Float), u))
    x_shape = shape[::-1] if view == "permuted" else shape
    x = np.zeros(x_shape, kfuse.dtypes.to_numpy_dtype(x_dtype))
    out, plus = fd.execute([x])
    _same(plus, out)  # x is 0: the value read twice is the same number
    return out.transpose(*range(len(shape))[::-1]) if view == "permuted" else out


@pytest.mark.parametrize("shape", [(1001,), (7, 130), (3, 5, 67)])
def test_every_schedule_draws_the_same_numbers(shape: tuple[int, ...]) -> None:
    want = ref.uniform(11, 2, shape, DataType.Float)
    for x_dtype in (DataType.Float, DataType.Half, DataType.Double):  # vector widths 4, 8, 2
        for view in ("plain", "permuted"):
            _same(np.ascontiguousarray(_uniform_seen_through(x_dtype, shape, view)), want)


def test_a_broadcast_random_row_is_one_draw_for_every_row() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        row = fd.ops.normal(0.0, 1.0, [1, fd.ops.size(x, 1)], rng_seed=4, rng_offset=0)
        fd.add_output(fd.ops.add(x, row))
    x = np.zeros((9, 203), np.float32)
    (got,) = fd.execute([x])
    _same(got, np.broadcast_to(ref.normal(4, 0, (1, 203), DataType.Float), x.shape).copy())


def test_random_values_feeding_a_reduction_are_drawn_once() -> None:
    # The generated value is computed in the reduction's kernel, where it would be loaded; the
    # output and its sum are of the same numbers.
    def define(stateless: bool) -> FusionDefinition:
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
            seeds = {"rng_seed": 21, "rng_offset": 8} if stateless else {}
            u = fd.ops.uniform(-1.0, 1.0, fd.ops.shape(x), **seeds)
            y = fd.ops.mul(x, u)
            fd.add_output(y)
            fd.add_output(fd.ops.sum(y, dims=[1]))
        return fd

    x = np.random.default_rng(2).standard_normal((33, 517)).astype(np.float32)
    fd = define(True)
    y, total = fd.execute([x])
    assert fd.last_program().schedulers() == [kfuse.SchedulerType.inner_persistent]
    _same(y, x * ref.uniform(21, 8, x.shape, DataType.Float, -1.0, 1.0))
    np.testing.assert_allclose(total, y.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)
    kfuse.manual_seed(21)
    stateful = define(False)
    for _ in range(2):
        y, total = stateful.execute([x])
        np.testing.assert_allclose(total, y.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_stateful_ops_of_one_kernel_take_consecutive_offsets() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.rand_like(x))
        fd.add_output(fd.ops.randn_like(x))
    x = np.zeros(130, np.float32)
    kfuse.manual_seed(3)
    for run in range(2):
        u, z = fd.execute([x])
        _same(u, ref.uniform(3, 2 * run, x.shape, DataType.Float))
        _same(z, ref.normal(3, 2 * run + 1, x.shape, DataType.Float))
    assert kfuse.runtime.rng_state.kfuse_generator().get_offset() == 4 * 4


@pytest.mark.parametrize("dtype", RANDOM_DTYPES)
def test_rand_like_and_randn_like_take_the_shape_and_dtype(dtype: DataType) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 1, 6], dtype=dtype)
        u = fd.ops.rand_like(x, rng_seed=5, rng_offset=1)
        z = fd.ops.randn_like(x, rng_seed=5, rng_offset=2)
        assert u.axes[1].is_broadcast and z.axes[1].is_broadcast
        fd.add_output(u)
        fd.add_output(z)
    storage = kfuse.dtypes.to_numpy_dtype(dtype)
    u, z = fd.execute([np.ones((4, 1, 6), storage)])
    _same(u, ref.uniform(5, 1, (4, 1, 6), dtype))
    _same(z, ref.normal(5, 2, (4, 1, 6), dtype))
    assert ((u.astype(np.float64) >= 0) & (u.astype(np.float64) < 1)).all()


def test_printed_definitions_rebuild_the_fusion() -> None:
    for stateless in (True, False):
        fd = _dropout(0.9, stateless=stateless)
        again = _rebuilt(fd)
        assert fusion_to_python(again.fusion) == fusion_to_python(fd.fusion)
    fd = _dropout(0.9, stateless=True)
    x = np.ones((4, 8), np.float32)
    for got, want in zip(_rebuilt(fd).execute([x, 1, 2]), fd.execute([x, 1, 2]), strict=True):
        _same(got, want)


def test_each_random_read_has_a_philox_memo_before_the_loop() -> None:
    fd = _dropout(0.5, stateless=False)
    with FusionDefinition() as two:
        x = two.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        two.add_output(fd_add(two, x, two.ops.rand_like(x), two.ops.randn_like(x)))
    for definition, reads in ((fd, 1), (two, 2)):
        definition.execute([np.ones((8, 64), np.float32)])
        source = definition.last_cuda_source()
        assert source is not None
        kernel = source[source.index('extern "C"') :]
        memos = re.findall(r"kf::PhiloxMemo (rng_memo\d+);", kernel)
        assert len(memos) == reads
        assert kernel.index("kf::PhiloxMemo") < kernel.index("for (Index row")
        assert "kf::philox(" not in kernel  # every element goes through its memo
        assert "long long rng_seed" in kernel and "long long rng_offset" in kernel


def fd_add(fd: FusionDefinition, *values: Any) -> Any:
    total = values[0]
    for v in values[1:]:
        total = fd.ops.add(total, v)
    return total


# ---- errors ----


def test_definition_errors() -> None:
    with FusionDefinition() as fd:
        seed = fd.define_scalar(None, dtype=DataType.Int)
        with pytest.raises(DefinitionError, match="together"):
            fd.ops.uniform(0.0, 1.0, [4], rng_seed=seed)
        with pytest.raises(DefinitionError, match="together"):
            fd.ops.normal(0.0, 1.0, [4], rng_offset=seed)
        with pytest.raises(DefinitionError, match="Float, Double, Half or BFloat16"):
            fd.ops.uniform(0.0, 1.0, [4], dtype=DataType.Int)
        with pytest.raises(DefinitionError, match="Float, Double, Half or BFloat16"):
            fd.ops.normal(0.0, 1.0, [4], dtype=DataType.Float8_e4m3fn)
        i = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        with pytest.raises(DefinitionError, match="rand_like"):
            fd.ops.rand_like(i)
        with pytest.raises(DefinitionError, match="rng_seed"):
            fd.ops.uniform(0.0, 1.0, [4], rng_seed=1.5, rng_offset=0)
        with pytest.raises(DefinitionError, match="shape"):
            fd.ops.uniform(0.0, 1.0, 4)
        fd.add_output(fd.ops.uniform(0.0, 1.0, [4]))  # the definition itself stays valid


def test_a_stateful_draw_has_no_reference() -> None:
    fd = _dropout(0.5, stateless=False)
    with pytest.raises(InputError, match="no reference"):
        evaluate(fd, [np.ones((2, 3), np.float32)])


# ---- the GPU ----


@pytest.mark.gpu
def test_dropout_on_the_gpu_equals_the_emulator_and_follows_torch_manual_seed() -> None:
    torch = pytest.importorskip("torch")
    host = np.random.default_rng(3).standard_normal((257, 1031)).astype(np.float32)
    x = torch.from_numpy(host).cuda()
    stateless = _dropout(0.9, stateless=True)
    for offset in (0, 1, 1 << 33):
        gpu = [t.cpu().numpy() for t in stateless.execute([x, 1234, offset])]
        emulated = stateless.execute([host, 1234, offset])  # NumPy inputs: the emulator
        for g, e in zip(gpu, emulated, strict=True):
            _same(g, e)
    stateful = _dropout(0.9, stateless=False)
    state = torch.cuda.get_rng_state()
    try:
        torch.manual_seed(1234)
        runs = [[t.cpu().numpy() for t in stateful.execute([x])] for _ in range(3)]
        for i, run in enumerate(runs):
            want = stateless.execute([host, 1234, i])
            for g, e in zip(run, want, strict=True):
                _same(g, e)
        # torch's generator moved 4 words per RNG op and launch
        assert torch.cuda.default_generators[x.device.index].get_offset() == 3 * 4
    finally:
        torch.cuda.set_rng_state(state)
