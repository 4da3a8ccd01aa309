"""Generated values (uniform, normal, full, iota) read by the reduction kernels (reduction,
inner and outer persistent, inner-outer) where they would load an input: one kernel for a
dropout whose mask is drawn in the fusion and feeds a layer norm or an RMS norm, the same
random numbers bit for bit as the pointwise kernel and kfuse.reference.philox draw, stateful
draws that follow kfuse.manual_seed as before, and GPU = emulator."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kfuse
from kfuse import DataType, FusionDefinition
from kfuse.dtypes import to_numpy_dtype
from kfuse.reference import philox as ref
from kfuse.schedule.types import SchedulerType

pytestmark = pytest.mark.usefixtures("module_private_cache")

RANDOM_DTYPES = [DataType.Float, DataType.Double, DataType.Half, DataType.BFloat16]
KEEP = 0.9
SEED, OFFSET = 0x5EED, 7


def _host(tensor: Any) -> Any:
    """A torch tensor as the NumPy array the emulator returns for it (BFloat16 as
    ml_dtypes.bfloat16, which torch's .numpy() does not give), the same bits."""
    import ml_dtypes
    import torch

    if tensor.dtype == torch.bfloat16:
        return tensor.cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.cpu().numpy()


def _same(got: Any, want: Any) -> None:
    """Equal bit for bit, dtypes and shapes too."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    bits = np.dtype(f"u{got.dtype.itemsize}")
    assert (got.view(bits) == want.view(bits)).all()


def _schedulers(fd: FusionDefinition) -> list[SchedulerType]:
    program = fd.last_program()
    assert program is not None
    return list(program.schedulers())


# ---- the same numbers from every reduction kernel ----


def _drawn_beside_a_reduction(op: str, dtype: DataType, axis: int, hold: bool) -> Any:
    """x + op(shape of x) and its max along `axis`; `hold`: the sum less the max is an output
    too, with the numbers themselves (a persistent kernel), else the max alone (a reduction)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        u = getattr(fd.ops, op)(
            0.0, 1.0, fd.ops.shape(x), rng_seed=SEED, rng_offset=OFFSET, dtype=dtype
        )
        y = fd.ops.add(x, u)
        top = fd.ops.max(y, dims=[axis])
        if hold:
            kept = [True, False] if axis == 0 else [False, True]
            fd.add_output(fd.ops.sub(y, fd.ops.broadcast(top, kept)))
            fd.add_output(u)
        fd.add_output(top)
    return fd


def _draw_cross() -> list:
    """Every (op, dtype, kernel): the README's command draws both ops of Float in every kernel
    and every dtype's in the inner persistent one (each dtype's conversion and each kernel's
    draw where it would load); the rest of the cross is CI's extended step (a kernel each)."""
    kernels = [
        (1, False, SchedulerType.reduction),
        (0, False, SchedulerType.reduction),
        (1, True, SchedulerType.inner_persistent),
        (0, True, SchedulerType.outer_persistent),
    ]
    cases = []
    for axis, hold, scheduler in kernels:
        for dtype in RANDOM_DTYPES:
            for op in ["uniform", "normal"]:
                quick = dtype is DataType.Float or scheduler is SchedulerType.inner_persistent
                marks = () if quick else (pytest.mark.extended,)
                cases.append(pytest.param(op, dtype, axis, hold, scheduler, marks=marks))
    return cases


@pytest.mark.parametrize(("op", "dtype", "axis", "hold", "scheduler"), _draw_cross())
def test_every_reduction_kernel_draws_the_reference_numbers(
    op: str, dtype: DataType, axis: int, hold: bool, scheduler: SchedulerType
) -> None:
    shape = (37, 203)
    fd = _drawn_beside_a_reduction(op, dtype, axis, hold)
    outs = fd.execute([np.zeros(shape, np.float32)])
    assert _schedulers(fd) == [scheduler]  # one kernel: the numbers drawn inside it
    want = getattr(ref, op)(SEED, OFFSET, shape, dtype)
    top = outs[-1]
    _same(top, want.astype(top.dtype).max(axis=axis))  # a max is exact: the same numbers
    if hold:
        _same(outs[1], want)


@pytest.mark.parametrize("shape", [(3, 70001), (70001, 3), (5, 2053)])
def test_a_grid_reduction_and_its_vector_widths_draw_the_same_numbers(
    shape: tuple[int, int],
) -> None:
    # No input tensor at all: the reduced extent reaches the finalize kernel through the
    # generated read's sizes.
    for axis in (0, 1):
        with FusionDefinition() as fd:
            n, m = (fd.define_scalar(None, dtype=DataType.Int) for _ in range(2))
            u = fd.ops.normal(0.5, 2.0, [n, m], rng_seed=3, rng_offset=5)
            fd.add_output(fd.ops.max(u, dims=[axis]))
        (top,) = fd.execute(list(shape))
        assert _schedulers(fd) == [SchedulerType.reduction]
        _same(top, ref.normal(3, 5, shape, DataType.Float, 0.5, 2.0).max(axis=axis))


def test_the_pointwise_and_the_persistent_kernel_draw_the_same_numbers() -> None:
    # The same definition with and without a norm after the draw: the pointwise kernel's numbers
    # are those the persistent kernel computes where it would load them.
    x = np.random.default_rng(4).standard_normal((24, 517)).astype(np.float32)

    def define(norm: bool) -> FusionDefinition:
        with FusionDefinition() as fd:
            t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
            u = fd.ops.uniform(-1.0, 1.0, fd.ops.shape(t), rng_seed=21, rng_offset=8)
            y = fd.ops.mul(t, u)
            fd.add_output(y)
            if norm:
                fd.add_output(fd.ops.sum(y, dims=[1]))
        return fd

    alone = define(False)
    (pointwise,) = alone.execute([x])
    assert _schedulers(alone) == [SchedulerType.pointwise]
    fused = define(True)
    y, total = fused.execute([x])
    assert _schedulers(fused) == [SchedulerType.inner_persistent]
    _same(y, pointwise)
    np.testing.assert_allclose(total, y.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_a_drawn_per_channel_weight_is_read_through_its_own_row_sub_axes() -> None:
    # A group norm's weight shape: constant along part of the row [C, H, W], so the kernel
    # decomposes the row index over its own sub-axes (row_split) to compute it.
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=DataType.Float)
        c = fd.ops.uniform(0.0, 1.0, [1, fd.ops.size(x, 1), 1, 1], rng_seed=2, rng_offset=3)
        y = fd.ops.mul(x, c)
        total = fd.ops.sum(y, dims=[1, 2, 3])
        fd.add_output(fd.ops.sub(y, fd.ops.broadcast(total, [False, True, True, True])))
    x = np.random.default_rng(0).standard_normal((4, 6, 5, 7)).astype(np.float32)
    (got,) = fd.execute([x])
    assert _schedulers(fd) == [SchedulerType.inner_persistent]
    y = x * ref.uniform(2, 3, (1, 6, 1, 1), DataType.Float).astype(np.float64)
    np.testing.assert_allclose(got, y - y.sum((1, 2, 3), keepdims=True), rtol=1e-4, atol=1e-4)


# ---- dropout + layer norm / RMS norm: one kernel ----


def _dropout_norm(dtype: DataType, layer_norm: bool) -> FusionDefinition:
    """nvFuser's dropout + layer norm (RMS norm) forward, the keep mask drawn inside and
    output: y = norm(x2 + x1 * mask / keep) * w (+ b), with the norm's statistics (b is an
    input of both, read by the layer norm alone)."""
    with FusionDefinition() as fd:
        x1, x2 = (
            fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype) for _ in range(2)
        )
        w, b = (fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype) for _ in range(2))
        u = fd.ops.uniform(0.0, 1.0, fd.ops.shape(x1), rng_seed=SEED, rng_offset=OFFSET)
        mask = fd.ops.lt(u, KEEP)
        x1f, x2f, wf, bf = (fd.ops.cast(t, DataType.Float) for t in (x1, x2, w, b))
        dropped = fd.ops.mul(fd.ops.mul(x1f, fd.ops.cast(mask, DataType.Float)), 1 / KEEP)
        h = fd.ops.add(x2f, dropped)
        n = fd.ops.cast(fd.ops.size(h, 1), DataType.Float)
        if layer_norm:
            mean = fd.ops.div(fd.ops.sum(h, dims=[1]), n)
            h = fd.ops.sub(h, fd.ops.broadcast(mean, [False, True]))
        var = fd.ops.div(fd.ops.sum(fd.ops.mul(h, h), dims=[1]), n)
        invstd = fd.ops.rsqrt(fd.ops.add(var, 1e-5))
        y = fd.ops.mul(fd.ops.mul(h, fd.ops.broadcast(invstd, [False, True])), wf)
        if layer_norm:
            y = fd.ops.add(y, bf)
            fd.add_output(mean)
        fd.add_output(fd.ops.cast(y, dtype))
        fd.add_output(invstd)
        fd.add_output(mask)
    return fd


def _dropout_norm_reference(
    x1: Any, x2: Any, w: Any, b: Any, layer_norm: bool
) -> tuple[np.ndarray, ...]:
    """In float64, with the mask recomputed by kfuse.reference.philox."""
    mask = ref.uniform(SEED, OFFSET, x1.shape, DataType.Float) < np.float32(KEEP)
    h = x2.astype(np.float64) + x1.astype(np.float64) * mask / KEEP
    stats = []
    if layer_norm:
        mean = h.mean(axis=1)
        h = h - mean[:, None]
        stats.append(mean)
    invstd = 1 / np.sqrt((h * h).mean(axis=1) + 1e-5)
    y = h * invstd[:, None] * w.astype(np.float64)
    if layer_norm:
        y = y + b.astype(np.float64)
    return (*stats, y, invstd, mask)


@pytest.mark.parametrize("layer_norm", [True, False], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Half, DataType.BFloat16])
def test_dropout_and_a_norm_are_one_kernel_with_the_philox_mask(
    layer_norm: bool, dtype: DataType
) -> None:
    rng = np.random.default_rng(7)
    shape = (33, 1030)
    storage = to_numpy_dtype(dtype)
    x1, x2 = (rng.standard_normal(shape).astype(storage) for _ in range(2))
    w, b = (rng.standard_normal(shape[1:]).astype(storage) for _ in range(2))
    fd = _dropout_norm(dtype, layer_norm)
    inputs = [x1, x2, w, b]
    assert len(fd.segments(inputs)) == 1
    got = fd.execute(inputs)
    assert _schedulers(fd) == [SchedulerType.inner_persistent]
    assert "_early(" in fd.last_cuda_source()  # the mask stored in the first pass
    want = _dropout_norm_reference(x1, x2, w, b, layer_norm)
    _same(got[-1], want[-1])  # the mask, drawn in the norm's kernel
    tolerance = 1e-4 if dtype == DataType.Float else 2e-2
    for g, e in zip(got[:-1], want[:-1], strict=True):
        np.testing.assert_allclose(
            np.asarray(g).astype(np.float64), e, rtol=tolerance, atol=tolerance
        )


@pytest.mark.parametrize("regenerated", [True, False], ids=["regenerated", "held"])
@pytest.mark.parametrize("shape", [(6, 1024), (5, 1030)], ids=["whole-groups", "ragged"])
@pytest.mark.parametrize("layer_norm", [True, False], ids=["layernorm", "rmsnorm"])
def test_a_drawn_mask_computed_again_each_pass_or_held_is_the_reference_mask(
    regenerated: bool, shape: tuple[int, int], layer_norm: bool, monkeypatch: Any
) -> None:
    # switches.REGENERATED_READS: the persistent kernel computes the numbers again in every
    # pass (a vector of a row of a multiple of four elements in whole Philox calls, others
    # lane by lane), or holds them with the row; the same mask and norm either way.
    from kfuse import switches

    monkeypatch.setattr(switches, "REGENERATED_READS", regenerated)
    rng = np.random.default_rng(3)
    x1, x2 = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    w, b = (rng.standard_normal(shape[1:]).astype(np.float32) for _ in range(2))
    fd = _dropout_norm(DataType.Float, layer_norm)
    got = fd.execute([x1, x2, w, b])
    assert _schedulers(fd) == [SchedulerType.inner_persistent]
    want = _dropout_norm_reference(x1, x2, w, b, layer_norm)
    _same(got[-1], want[-1])
    for g, e in zip(got[:-1], want[:-1], strict=True):
        np.testing.assert_allclose(np.asarray(g).astype(np.float64), e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("regenerated", [True, False], ids=["regenerated", "held"])
@pytest.mark.parametrize("shape", [(6, 1024), (5, 1030)], ids=["whole-groups", "ragged"])
def test_a_welford_over_drawn_numbers_computed_again_each_pass(
    regenerated: bool, shape: tuple[int, int], monkeypatch: Any
) -> None:
    # The Welford's shift (its row's first value), mean and squared-deviation passes each
    # compute the numbers again where they are regenerated.
    from kfuse import switches

    monkeypatch.setattr(switches, "REGENERATED_READS", regenerated)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        u = fd.ops.uniform(0.0, 1.0, fd.ops.shape(x), rng_seed=SEED, rng_offset=OFFSET)
        h = fd.ops.add(x, u)
        var, mean = fd.ops.var_mean(h, dims=[1], correction=0)
        fd.add_output(fd.ops.sub(h, fd.ops.broadcast(mean, [False, True])))
        fd.add_output(var)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    centred, var = fd.execute([x])
    assert _schedulers(fd) == [SchedulerType.inner_persistent]
    h = x.astype(np.float64) + ref.uniform(SEED, OFFSET, shape, DataType.Float)
    np.testing.assert_allclose(centred, h - h.mean(1, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(var, h.var(1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("regenerated", "in_shared_memory"), [(True, False), (False, True)])
def test_a_drawn_mask_costs_the_held_row_no_bytes(
    regenerated: bool, in_shared_memory: bool, monkeypatch: Any
) -> None:
    # Held, the float numbers (4 bytes an element) sent a bf16 dropout + layer norm row of
    # 16384 to shared memory, where its twin with the Bool mask given is held in registers.
    import ml_dtypes

    from kfuse import schedule, switches

    monkeypatch.setattr(switches, "REGENERATED_READS", regenerated)
    monkeypatch.setenv("KFUSE_EMULATOR_PROFILE", "h200")
    x = np.empty((2048, 16384), ml_dtypes.bfloat16)
    w = np.empty((16384,), ml_dtypes.bfloat16)
    fd = _dropout_norm(DataType.BFloat16, True)
    hp = schedule.compute_heuristics(fd.fusion, SchedulerType.inner_persistent, [x, x, w, w])
    assert bool(hp.smem_persistent) is in_shared_memory


@pytest.mark.parametrize("regenerated", [True, False], ids=["regenerated", "held"])
def test_an_outer_norm_draws_the_same_numbers_computed_again_or_held(
    regenerated: bool, monkeypatch: Any
) -> None:
    from kfuse import switches

    monkeypatch.setattr(switches, "REGENERATED_READS", regenerated)
    shape = (203, 37)
    fd = _drawn_beside_a_reduction("uniform", DataType.Float, 0, hold=True)
    outs = fd.execute([np.zeros(shape, np.float32)])
    assert _schedulers(fd) == [SchedulerType.outer_persistent]
    want = ref.uniform(SEED, OFFSET, shape, DataType.Float)
    _same(outs[1], want)
    _same(outs[0], want - want.max(axis=0))


def test_a_draw_feeding_row_and_column_sums_is_one_inner_outer_kernel() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        g = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        u = fd.ops.uniform(0.0, 1.0, fd.ops.shape(x), rng_seed=9, rng_offset=1)
        y = fd.ops.mul(x, u)
        rows = fd.ops.sum(y, dims=[1])
        fd.add_output(fd.ops.mul(g, fd.ops.sub(y, fd.ops.broadcast(rows, [False, True]))))
        fd.add_output(fd.ops.sum(fd.ops.mul(g, y), dims=[0]))
    rng = np.random.default_rng(1)
    x, g = (rng.standard_normal((512, 256)).astype(np.float32) for _ in range(2))
    z, columns = fd.execute([x, g])
    assert _schedulers(fd) == [SchedulerType.inner_outer_persistent]
    y = x * ref.uniform(9, 1, x.shape, DataType.Float).astype(np.float64)
    np.testing.assert_allclose(z, g * (y - y.sum(1, keepdims=True)), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(columns, (g * y).sum(0), rtol=1e-4, atol=1e-3)


def test_a_norm_drawing_at_a_seed_and_offset_given_per_call_draws_each_calls_numbers() -> None:
    # The seed and offset are scalar inputs: the later calls replay the kernel on the fast
    # path with the new values.
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        seed, offset = (fd.define_scalar(None, dtype=DataType.Int) for _ in range(2))
        u = fd.ops.uniform(0.0, 1.0, fd.ops.shape(x), rng_seed=seed, rng_offset=offset)
        y = fd.ops.add(x, u)
        top = fd.ops.max(y, dims=[1])
        fd.add_output(fd.ops.sub(y, fd.ops.broadcast(top, [False, True])))
        fd.add_output(u)
    x = np.zeros((12, 257), np.float32)
    for s, o in [(1, 0), (1, 1), (2, 1 << 33), (1, 0)]:
        _, u = fd.execute([x, s, o])
        assert _schedulers(fd) == [SchedulerType.inner_persistent]
        _same(u, ref.uniform(s, o, x.shape, DataType.Float))


# ---- stateful draws ----


@pytest.mark.parametrize(
    ("sums", "scheduler"),
    [
        ((1,), SchedulerType.inner_persistent),
        ((0,), SchedulerType.outer_persistent),
        ((1, 0), SchedulerType.inner_outer_persistent),
    ],
)
def test_stateful_draws_in_a_norm_follow_manual_seed_as_stateless_ones(
    sums: tuple[int, ...], scheduler: SchedulerType
) -> None:
    # After kfuse.manual_seed(s), run i of the stateful fusion equals the stateless one at
    # rng_seed=s, rng_offset=i: the norm's kernel reserves its one op's offsets as the
    # pointwise kernel did.
    def define(stateless: bool) -> FusionDefinition:
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
            seeds = (
                {"rng_seed": 77, "rng_offset": fd.define_scalar(None, dtype=DataType.Int)}
                if stateless
                else {}
            )
            u = fd.ops.normal(0.0, 1.0, fd.ops.shape(x), **seeds)
            y = fd.ops.mul(x, u)
            fd.add_output(y)
            for axis in sums:
                fd.add_output(fd.ops.sum(y, dims=[axis]))
        return fd

    x = np.random.default_rng(6).standard_normal((512, 256)).astype(np.float32)
    stateful, stateless = define(False), define(True)
    kfuse.manual_seed(77)
    for run in range(3):
        got = stateful.execute([x])
        assert _schedulers(stateful) == [scheduler]
        for g, e in zip(got, stateless.execute([x, run]), strict=True):
            _same(g, e)
        _same(got[0], x * ref.normal(77, run, x.shape, DataType.Float))
    assert kfuse.runtime.rng_state.kfuse_generator().get_offset() == 3 * 4


# ---- factories ----


@pytest.mark.parametrize("axis", [0, 1])
def test_factories_feeding_a_sum_are_one_reduction_kernel(axis: int) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        ramp = fd.ops.iota(fd.ops.size(x, 1), 0.0, 0.5, dtype=DataType.Float)
        ones = fd.ops.full(fd.ops.shape(x), 2.0, DataType.Float)
        y = fd.ops.mul(fd.ops.add(x, fd.ops.broadcast(ramp, [True, False])), ones)
        fd.add_output(fd.ops.sum(y, dims=[axis]))
    x = np.random.default_rng(3).integers(-4, 4, (19, 301)).astype(np.float32)
    (total,) = fd.execute([x])
    assert _schedulers(fd) == [SchedulerType.reduction]
    want = ((x + 0.5 * np.arange(301, dtype=np.float32)) * 2).astype(np.float64).sum(axis=axis)
    np.testing.assert_array_equal(total, want.astype(np.float32))  # small integers: exact


# ---- NVRTC ----


@pytest.mark.extended  # NVRTC of every kernel of this module (8 s): CI's extended step
def test_nvrtc_compiles_every_reduction_kernel_reading_generated_values() -> None:
    # NVRTC is a test dependency: it compiles without a GPU. The kernels: a reduction and its
    # grid form, inner and outer persistent ones (held rows of a wide norm in shared memory),
    # a stateful draw and an inner-outer kernel.
    from kfuse.runtime.backends.cuda import compile_to_cubin, nvrtc_options
    from source_corpus import recorded_sources

    cases = [(_drawn_beside_a_reduction("normal", DataType.Half, 1, False), (4, 1 << 20))]
    cases += [
        (_drawn_beside_a_reduction("uniform", DataType.Float, a, True), (64, 96)) for a in (0, 1)
    ]
    cases.append((_dropout_norm(DataType.BFloat16, layer_norm=True), (8, 32768)))
    with FusionDefinition() as stateful:
        x = stateful.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        y = stateful.ops.mul(x, stateful.ops.rand_like(x))
        stateful.add_output(y)
        stateful.add_output(stateful.ops.sum(y, dims=[1]))
        stateful.add_output(stateful.ops.sum(y, dims=[0]))
    cases.append((stateful, (512, 256)))
    found: list[tuple[str, str]] = []
    with recorded_sources(found):
        for fd, shape in cases:
            n_inputs = sum(1 for v in fd.fusion.inputs if hasattr(v, "axes"))
            inputs = [np.ones(shape if i < 2 else shape[1:], np.float32) for i in range(n_inputs)]
            fd.execute(
                [a.astype(to_numpy_dtype(v.dtype)) for a, v in zip(inputs, fd.fusion.inputs)]
            )
    made = [(name, source) for name, source in found if "kf::generated(" in source]
    assert len(made) >= len(cases)
    for name, source in made:
        assert compile_to_cubin(source, name, "sm_90", nvrtc_options())[:4] == b"\x7fELF"


# ---- the GPU ----


@pytest.mark.gpu
@pytest.mark.parametrize("layer_norm", [True, False], ids=["layernorm", "rmsnorm"])
def test_dropout_norms_on_the_gpu_equal_the_emulator(layer_norm: bool) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    shape = (2048, 4096)
    host = [rng.standard_normal(s).astype(np.float32) for s in (shape, shape, shape[1:], shape[1:])]
    fd = _dropout_norm(DataType.Float, layer_norm)
    gpu = fd.execute([torch.from_numpy(a).cuda() for a in host])
    assert _schedulers(fd) == [SchedulerType.inner_persistent]
    from kfuse import switches

    # the mask stored in the first pass (kfuse.codegen.early_outputs) where that is on
    assert ("_early(" in fd.last_cuda_source()) == switches.EARLY_OUTPUTS
    emulated = fd.execute(host)
    _same(gpu[-1].cpu().numpy(), emulated[-1])
    for g, e in zip(gpu[:-1], emulated[:-1], strict=True):
        np.testing.assert_allclose(g.cpu().numpy(), e, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["uniform", "normal"])
@pytest.mark.parametrize("dtype", RANDOM_DTYPES)
@pytest.mark.parametrize(("axis", "hold"), [(1, False), (0, False), (1, True), (0, True)])
def test_reduction_kernels_draw_on_the_gpu_what_the_emulator_draws(
    op: str, dtype: DataType, axis: int, hold: bool
) -> None:
    torch = pytest.importorskip("torch")
    host = np.zeros((1000, 1030), np.float32)
    fd = _drawn_beside_a_reduction(op, dtype, axis, hold)
    gpu = fd.execute([torch.from_numpy(host).cuda()])
    for g, e in zip(gpu, fd.execute([host]), strict=True):
        _same(_host(g), e)
