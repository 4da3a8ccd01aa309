"""Float8_e4m3fn and Float8_e5m2: the runtime's conversions (kf_float8.cuh) compiled as the
emulator compiles them, checked exhaustively against torch and ml_dtypes; fusions with float8
inputs, outputs and casts on the emulator against the reference; the dtype rules; and, on a
GPU, the same with torch's float8 CUDA tensors.

torch (2.13) and ml_dtypes round float32 to float8 alike (to nearest even) but for one case:
Float8_e4m3fn has no infinity, and torch saturates a magnitude that rounds past 448 (an
infinity too) to +-448 where ml_dtypes gives NaN. kfuse follows torch; the tests pin both
the agreement and that one difference.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from kfuse import DataType, FusionDefinition
from kfuse.dtypes import ALL_DTYPES, FLOAT8_FORMATS, round_to_float8, to_numpy_dtype
from kfuse.errors import DefinitionError, InputError
from kfuse.reference import evaluate
from kfuse.runtime.emulator import EmulatedKernel
from kfuse.runtime.runtime_header import float8_header, runtime_header
from kfuse.testing import assert_outputs_close, inputs_for

E4M3 = DataType.Float8_e4m3fn
E5M2 = DataType.Float8_e5m2
FLOAT8 = (E4M3, E5M2)
_TORCH = {E4M3: torch.float8_e4m3fn, E5M2: torch.float8_e5m2}
_ML = {E4M3: ml_dtypes.float8_e4m3fn, E5M2: ml_dtypes.float8_e5m2}


# Every kernel of this module compiles into a cache of its own (conftest).
pytestmark = pytest.mark.usefixtures("module_private_cache")


# ---------------------------------------------------------------------------------------------
# The conversions, as the emulator compiles the runtime
# ---------------------------------------------------------------------------------------------

_CONVERSIONS = r"""
// One thread converts every element: to float8 from float, and back to float.
extern "C" __global__ void to_float8(kf::Tensor<float, 1, long long> x,
                                     kf::Tensor<kf::float8_e4m3fn, 1, long long> e4m3,
                                     kf::Tensor<kf::float8_e5m2, 1, long long> e5m2) {
  for (long long i = 0; i < x.size[0]; ++i) {
    kf::store(e4m3, i, kf::cast<kf::float8_e4m3fn>(kf::load(x, i)));
    kf::store(e5m2, i, kf::from_float<kf::float8_e5m2>(kf::load(x, i)));
  }
}

extern "C" __global__ void from_float8(kf::Tensor<kf::float8_e4m3fn, 1, long long> e4m3,
                                       kf::Tensor<kf::float8_e5m2, 1, long long> e5m2,
                                       kf::Tensor<float, 1, long long> f4,
                                       kf::Tensor<float, 1, long long> f5) {
  for (long long i = 0; i < e4m3.size[0]; ++i) {
    kf::store(f4, i, kf::to_float(kf::load(e4m3, i)));
    kf::store(f5, i, kf::cast<float>(kf::load(e5m2, i)));
  }
}
"""


def _source() -> str:
    return runtime_header() + "\n" + float8_header() + "\n" + _CONVERSIONS


def _emulated_to_float8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.ascontiguousarray(x, dtype=np.float32)
    e4m3, e5m2 = np.zeros(x.size, np.uint8), np.zeros(x.size, np.uint8)
    EmulatedKernel(_source(), "to_float8").launch(1, 1, 0, [x, e4m3, e5m2])
    return e4m3, e5m2


def _sweep() -> np.ndarray:
    """float32 inputs that reach every rounding decision: every 4099th bit pattern of both
    signs (so every binade, float subnormals included), each tie between consecutive float8
    values of both formats with its float32 neighbours, the overflow thresholds, and the
    special values."""
    strided = np.arange(0, 0x80000000, 4099, dtype=np.uint64).astype(np.uint32)
    values = [strided.view(np.float32)]
    for ml in _ML.values():
        codes = np.arange(256, dtype=np.uint8).view(ml).astype(np.float64)
        finite = np.unique(codes[np.isfinite(codes)])
        ties = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)  # exact in float32
        values += [ties, np.nextafter(ties, np.float32(-np.inf)), np.nextafter(ties, np.inf)]
    specials = [0.0, 448.0, 464.0, 480.0, 57344.0, 61440.0, 65536.0, 1e38, np.inf, np.nan]
    values.append(np.array(specials, np.float32))
    values.append(np.array([0x7F800001, 0x7FBFFFFF, 0x7FC00001], np.uint32).view(np.float32))
    both = np.concatenate(values)
    return np.concatenate([both, -both])


def _torch_bits(x: np.ndarray, dtype: DataType) -> np.ndarray:
    return torch.from_numpy(x).to(_TORCH[dtype]).view(torch.uint8).numpy()


def test_float_to_float8_is_torchs_rounding_bit_for_bit() -> None:
    x = _sweep()
    e4m3, e5m2 = _emulated_to_float8(x)
    for dtype, got in ((E4M3, e4m3), (E5M2, e5m2)):
        want = _torch_bits(x, dtype)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (
            f"{dtype.value}: {bad.size} of {x.size} differ from torch, e.g. "
            f"{x[bad[:4]]} -> {got[bad[:4]]} (torch {want[bad[:4]]})"
        )


def test_float_to_float8_agrees_with_ml_dtypes_but_for_e4m3fn_overflow() -> None:
    x = _sweep()
    e4m3, e5m2 = _emulated_to_float8(x)
    for dtype, got in ((E4M3, e4m3), (E5M2, e5m2)):
        ours = got.view(_ML[dtype]).astype(np.float64)
        theirs = x.astype(_ML[dtype]).astype(np.float64)
        same = (ours == theirs) | (np.isnan(ours) & np.isnan(theirs))
        if dtype is E4M3:
            # torch's saturation: ml_dtypes' NaN for every non-NaN beyond 464, ours +-448
            overflow = ~np.isnan(x) & (np.abs(x) > 464)
            assert overflow.any()
            assert np.isnan(theirs[overflow]).all()
            np.testing.assert_array_equal(ours[overflow], np.copysign(448.0, x[overflow]))
            same |= overflow
        assert same.all(), f"{dtype.value}: {int((~same).sum())} differ, e.g. {x[~same][:4]}"


def test_every_float8_code_widens_exactly() -> None:
    codes = np.arange(256, dtype=np.uint8)
    f4, f5 = np.zeros(256, np.float32), np.zeros(256, np.float32)
    EmulatedKernel(_source(), "from_float8").launch(1, 1, 0, [codes, codes, f4, f5])
    for dtype, got in ((E4M3, f4), (E5M2, f5)):
        want = codes.view(_ML[dtype]).astype(np.float32)
        np.testing.assert_array_equal(got, want)  # NaN where ml_dtypes has NaN, else equal
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # -0.0 included
        by_torch = torch.from_numpy(codes).view(_TORCH[dtype]).float().numpy()
        np.testing.assert_array_equal(got, by_torch)


@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: d.value)
def test_reference_rounding_is_torchs(dtype: DataType) -> None:
    """kfuse.dtypes.round_to_float8 (the reference's and the input strategies' rounding) on
    the same sweep, and on float64 values, which torch too converts through float32."""
    x = _sweep()
    want = torch.from_numpy(x).to(_TORCH[dtype]).double().numpy()
    np.testing.assert_array_equal(round_to_float8(x, dtype), want)
    wide = np.random.default_rng(3).standard_normal(10_000) * 300
    want = torch.from_numpy(wide).to(_TORCH[dtype]).double().numpy()
    np.testing.assert_array_equal(round_to_float8(wide, dtype), want)


# ---------------------------------------------------------------------------------------------
# DataType rules
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: d.value)
def test_float8_properties_and_mappings(dtype: DataType) -> None:
    assert dtype.itemsize == 1 and dtype.is_floating and dtype.is_float8
    assert dtype.is_reduced_float and not dtype.is_integral
    assert to_numpy_dtype(dtype) == np.dtype(_ML[dtype])
    assert DataType(dtype.value) is dtype
    from kfuse.dtypes import as_dtype, to_torch_dtype

    assert to_torch_dtype(dtype) is _TORCH[dtype]
    assert as_dtype(_TORCH[dtype]) is dtype
    assert as_dtype(np.dtype(_ML[dtype])) is dtype


def _binary(op: str, a: object, b: object) -> DataType:
    with FusionDefinition() as fd:
        args = [fd.define_tensor([-1], dtype=x) if isinstance(x, DataType) else x for x in (a, b)]
        out = getattr(fd.ops, op)(*args)
        fd.add_output(out)
    return out.dtype


@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: d.value)
def test_promotion_follows_torch(dtype: DataType) -> None:
    # a float8 type promotes with itself and with weak Python numbers only
    assert _binary("add", dtype, dtype) is dtype
    assert _binary("mul", dtype, 2.5) is dtype
    assert _binary("mul", dtype, 3) is dtype
    assert _binary("lt", dtype, dtype) is DataType.Bool
    assert torch.result_type(torch.zeros(1, dtype=_TORCH[dtype]), 2.5) == _TORCH[dtype]
    for other in (E5M2 if dtype is E4M3 else E4M3, DataType.Half, DataType.Float, DataType.Int):
        with pytest.raises(DefinitionError, match="float8"):
            _binary("add", dtype, other)
        with pytest.raises(RuntimeError, match="Float8"):
            torch.promote_types(_TORCH[dtype], to_torch(other))


def to_torch(dtype: DataType) -> torch.dtype:
    from kfuse.dtypes import to_torch_dtype

    return to_torch_dtype(dtype)


def test_float8_matmul_is_a_definition_error() -> None:
    with pytest.raises(DefinitionError, match="float8"), FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], dtype=E4M3)
        fd.ops.matmul(a, a)


# ---------------------------------------------------------------------------------------------
# Fusions on the emulator
# ---------------------------------------------------------------------------------------------


def check(fd: FusionDefinition, outputs: list, inputs: list) -> None:
    """Outputs against the float64 reference, and the reference in the kernel's precision for
    what float64 cannot judge: x * x = 20736 saturates to 448 in Float8_e4m3fn."""
    same = evaluate(fd.fusion, inputs, accumulate="same")
    assert_outputs_close(fd.fusion, outputs, evaluate(fd.fusion, inputs), inputs, alternative=same)


def _casts_and_math(src: DataType, dst: DataType) -> FusionDefinition:
    """A float8 input through float math to float8 outputs, a cast between the two formats,
    math on float8 values themselves (computed in float, rounded to the input's dtype), and a
    row max kept in float8."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], dtype=src)
        b = fd.define_tensor([-1], dtype=DataType.Float)
        y = fd.ops.add(fd.ops.mul(fd.ops.cast(x, DataType.Float), 3.0), b)
        fd.add_output(fd.ops.cast(y, dst))
        fd.add_output(fd.ops.cast(x, dst))
        fd.add_output(fd.ops.mul(x, x))
        fd.add_output(fd.ops.cast(fd.ops.cast(y, src), DataType.Half))
    return fd


@pytest.mark.parametrize("src, dst", [(E4M3, E5M2), (E5M2, E4M3), (E4M3, E4M3)])
def test_pointwise_float8_fusion_matches_reference(src: DataType, dst: DataType) -> None:
    fd = _casts_and_math(src, dst)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((37, 129)) * 40).astype(np.float32).astype(_ML[src])
    b = rng.standard_normal(129).astype(np.float32) * 100
    outputs = fd.execute([x, b])
    want = [np.dtype(_ML[d]) for d in (dst, dst, src)] + [np.dtype(np.float16)]
    assert [o.dtype for o in outputs] == want
    check(fd, outputs, [x, b])
    # the casts are exact operations: bit for bit what torch gives
    xt = torch.from_numpy(x.astype(np.float32))
    np.testing.assert_array_equal(
        outputs[1].view(np.uint8),
        xt.to(_TORCH[src]).to(_TORCH[dst]).view(torch.uint8).numpy(),
    )
    yt = (xt * 3.0 + torch.from_numpy(b)).to(_TORCH[dst])
    np.testing.assert_array_equal(outputs[0].view(np.uint8), yt.view(torch.uint8).numpy())


@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: d.value)
def test_float8_reductions_and_torch_cpu_tensors(dtype: DataType) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], dtype=dtype)
        fd.add_output(fd.ops.max(x, dims=[1]))
        fd.add_output(fd.ops.sum(x, dims=[0]))  # accumulates in Float, returns dtype
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.cast(x, DataType.Float), dims=[1]), dtype))
    xt = (torch.randn(23, 300, generator=torch.Generator().manual_seed(2)) * 8).to(_TORCH[dtype])
    outputs = fd.execute([xt])
    assert all(o.dtype == _TORCH[dtype] for o in outputs)
    check(fd, outputs, [xt])
    torch.testing.assert_close(outputs[0].float(), xt.float().amax(1), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: d.value)
def test_every_dtype_casts_to_and_from_float8_as_torch(dtype: DataType) -> None:
    others = [d for d in ALL_DTYPES if d is not dtype]
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], dtype=dtype)
        ins = [fd.define_tensor([-1], dtype=d) for d in others]
        for d in others:
            fd.add_output(fd.ops.cast(x, d))
        for v in ins:
            fd.add_output(fd.ops.cast(v, dtype))
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(_TORCH[dtype])
    wide = torch.linspace(-600, 600, 256, dtype=torch.float64)
    args = [codes] + [wide.to(to_torch(d)) for d in others]
    outputs = fd.execute(args)
    expected = [codes.to(to_torch(d)) for d in others] + [a.to(_TORCH[dtype]) for a in args[1:]]
    for d, got, want in zip(others + [dtype] * len(others), outputs, expected, strict=True):
        assert got.dtype == want.dtype
        if d.is_floating:
            torch.testing.assert_close(got.double(), want.double(), rtol=0, atol=0, equal_nan=True)
        else:
            # a float8 NaN or infinity to an integer is undefined in torch's CPU cast
            # (kfuse's saturates, NaN to 0, as on the GPU)
            keep = torch.isfinite(codes.float()) | (d is DataType.Bool)
            assert torch.equal(got[keep], want[keep]), d


def test_numpy_array_of_another_dtype_is_an_input_error() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], dtype=E4M3)
        fd.add_output(fd.ops.cast(x, DataType.Float))
    with pytest.raises(InputError, match=r"Float8_e4m3fn.*Float.*ml_dtypes\.float8_e4m3fn"):
        fd.execute([np.ones(4, np.float32)])
    with pytest.raises(InputError, match="Float8_e4m3fn"):
        fd.execute([np.ones(4, np.float32).astype(ml_dtypes.float8_e5m2)])
    with pytest.raises(InputError, match="Float8_e4m3fn"):
        fd.execute([torch.ones(4, dtype=torch.float8_e5m2)])
    (out,) = fd.execute(
        [np.array([1.5, -448, 0.0078125, 3], np.float32).astype(ml_dtypes.float8_e4m3fn)]
    )
    np.testing.assert_array_equal(out, [1.5, -448, 0.0078125, 3])


@pytest.mark.slow
def test_strategies_draw_float8_inputs_for_every_framework_they_support() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    fd = _casts_and_math(E4M3, E5M2)

    @settings(max_examples=5, deadline=None)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        for framework in ("numpy", "torch"):
            inputs = data.draw(inputs_for(fd, framework=framework, max_elements=512))
            assert str(inputs[0].dtype).endswith("float8_e4m3fn")
            values = np.asarray(
                inputs[0].astype(np.float32) if framework == "numpy" else inputs[0].float()
            )
            np.testing.assert_array_equal(values, round_to_float8(values, E4M3))
            check(fd, fd.execute(inputs), inputs)

    run()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pointwise", "reduction", "normalization"])
def test_campaign_examples_with_float8_dtypes_pass_on_the_emulator(kind: str) -> None:
    """The campaign's property (kfuse.campaign.property.check: three calls, the reference in
    float64 and in the kernel's precision) on fusions drawn with float8 inputs and outputs."""
    from hypothesis import given, settings

    from kfuse.campaign.property import ExampleSpace, check, examples

    space = ExampleSpace(
        kinds=(kind,),
        dtypes=(E4M3, E5M2, DataType.Float, DataType.Int32),
        max_rank=3,
        max_ops=6,
        max_elements=1 << 10,
        framework="numpy",
        device="cpu",
    )

    drawn: list[bool] = []

    @settings(max_examples=6, deadline=None, database=None)
    @given(examples(space))
    def run(example) -> None:  # noqa: ANN001
        drawn.append(any(v.dtype.is_float8 for v in example.fd.fusion.inputs))
        check(example)

    run()
    assert any(drawn), "no example had a float8 input"


def _indexed_reads(dtype: DataType) -> FusionDefinition:
    """index_select, gather and take_along_axis of a float8 tensor (an embedding table in
    float8, as quantized models keep one), one of them widened to Float after the read."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], dtype=dtype)
        ids = fd.define_tensor([-1], dtype=DataType.Int)
        positions = fd.define_tensor([-1, -1], dtype=DataType.Int32)
        fd.add_output(fd.ops.index_select(x, ids, 0))
        fd.add_output(fd.ops.gather(x, positions, 1))
        taken = fd.ops.take_along_axis(x, positions, 1)
        fd.add_output(fd.ops.mul(fd.ops.cast(taken, DataType.Float), 2.0))
    return fd


@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: d.value)
def test_indexed_reads_of_float8_values(dtype: DataType) -> None:
    """The reads compile for a float8 tensor (they did not: the out-of-range fill had no
    float8 value, found by an emulator campaign with float8 inputs) and read its values
    exactly; a position outside the axis is still an InputError naming it."""
    fd = _indexed_reads(dtype)
    x = (np.random.default_rng(3).standard_normal((9, 13)) * 30).astype(_ML[dtype])
    ids = np.array([8, 0, 3, 3], np.int64)
    positions = np.random.default_rng(4).integers(0, 13, (9, 5)).astype(np.int32)
    outputs = fd.execute([x, ids, positions])
    check(fd, outputs, [x, ids, positions])
    np.testing.assert_array_equal(outputs[0].view(np.uint8), x[ids].view(np.uint8))
    with pytest.raises(InputError, match="13"):
        fd.execute([x, ids, np.full((9, 5), 13, np.int32)])


# ---------------------------------------------------------------------------------------------
# The generated sources: the float8 part only where it is used, and NVRTC compiles it
# ---------------------------------------------------------------------------------------------


def _float8_kernel_sources() -> list[tuple[str, str]]:
    """(name, source) of the kernels of a pointwise, a reduction and a normalization fusion
    with float8 inputs and outputs, as the emulator schedules them."""
    from source_corpus import recorded_sources

    with FusionDefinition() as norm:
        x = norm.define_tensor([-1, -1], dtype=E5M2)
        fd_x = norm.ops.cast(x, DataType.Float)
        mean = norm.ops.mean(fd_x, dims=[1], keepdim=True)
        norm.add_output(norm.ops.cast(norm.ops.sub(fd_x, mean), E4M3))
    found: list[tuple[str, str]] = []
    x4 = np.ones((64, 300), np.float32).astype(ml_dtypes.float8_e4m3fn)
    with recorded_sources(found):
        _casts_and_math(E4M3, E5M2).execute([x4, np.ones(300, np.float32)])
        norm.execute([np.ones((64, 1000), np.float32).astype(ml_dtypes.float8_e5m2)])
        positions = np.zeros((64, 3), np.int32)
        _indexed_reads(E4M3).execute([x4, np.arange(5), positions])
    return found


def test_only_kernels_that_use_float8_get_its_part() -> None:
    kernels = _float8_kernel_sources()
    assert len(kernels) >= 2
    for _, source in kernels:
        assert source.startswith(runtime_header() + "\n" + float8_header())
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], dtype=DataType.Half)
        fd.add_output(fd.ops.exp(x))
    fd.execute([np.ones(8, np.float16)])
    assert "float8" not in fd.last_cuda_source()


# NVRTC of every float8 kernel for both architectures (4 s each): CI's extended step.
@pytest.mark.extended
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_float8_kernels(arch: str) -> None:
    """As the GPU backend compiles them (its options and, with NVRTC 12.8+, the runtime header
    as a precompiled include): no toolkit header needed, and no float8 conversion instruction,
    which would saturate e5m2 and differ from the emulator."""
    from kfuse.runtime.backends.cuda import compile_to_ptx, nvrtc_options

    for name, source in _float8_kernel_sources():
        ptx = compile_to_ptx(source, name, arch, nvrtc_options())
        assert f".entry {name}" in ptx
        assert "e4m3" not in ptx and "e5m2" not in ptx


# ---------------------------------------------------------------------------------------------
# On a GPU: torch float8 CUDA tensors
# ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("src, dst", [(E4M3, E5M2), (E5M2, E4M3)])
def test_gpu_float8_fusion_matches_reference_and_torch(src: DataType, dst: DataType) -> None:
    fd = _casts_and_math(src, dst)
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = (torch.randn(301, 1029, device="cuda", generator=gen) * 40).to(_TORCH[src])
    b = torch.randn(1029, device="cuda", generator=gen) * 100
    outputs = fd.execute([x, b])
    assert [o.dtype for o in outputs] == [_TORCH[dst], _TORCH[dst], _TORCH[src], torch.float16]
    assert all(o.is_cuda for o in outputs)
    check(fd, outputs, [x, b])
    torch.testing.assert_close(outputs[1].view(torch.uint8), x.to(_TORCH[dst]).view(torch.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: d.value)
def test_gpu_conversions_are_torchs_bit_for_bit(dtype: DataType) -> None:
    """The sweep through a kernel compiled by NVRTC (with KFUSE_USE_PTX): the same bits as
    torch's CUDA conversion and as the emulator's."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], dtype=DataType.Float)
        y = fd.ops.cast(x, dtype)
        fd.add_output(y)
        fd.add_output(fd.ops.cast(y, DataType.Float))
    values = _sweep()
    sweep = torch.from_numpy(values).cuda()
    bits, back = fd.execute([sweep])
    # kfuse's rounding everywhere (torch 2.13's: the emulator tests pin it against torch)...
    np.testing.assert_array_equal(
        back.cpu().numpy().astype(np.float64), round_to_float8(values, dtype)
    )
    # ... and the GPU's torch bit for bit short of overflow: torch releases before 2.12 turn
    # an e4m3fn overflow into NaN on the CPU, and the GPU machine's torch may be one.
    in_range = torch.from_numpy(np.abs(values) <= FLOAT8_FORMATS[dtype].max_finite).cuda()
    want = sweep.to(_TORCH[dtype])
    assert torch.equal(bits.view(torch.uint8)[in_range], want.view(torch.uint8)[in_range])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: d.value)
def test_gpu_float8_reduction(dtype: DataType) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], dtype=dtype)
        fd.add_output(fd.ops.max(x, dims=[1]))
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.cast(x, DataType.Float), dims=[0]), dtype))
    x = (torch.randn(513, 4099, device="cuda") * 8).to(_TORCH[dtype])
    outputs = fd.execute([x])
    check(fd, outputs, [x])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: d.value)
def test_gpu_indexed_reads_of_float8_values(dtype: DataType) -> None:
    """As on the emulator: NVRTC compiles the reads, which return the table's bytes; an id
    outside it is an InputError and the context stays usable."""
    fd = _indexed_reads(dtype)
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = (torch.randn(4099, 257, device="cuda", generator=gen) * 30).to(_TORCH[dtype])
    ids = torch.randint(0, 4099, (1031,), device="cuda", generator=gen)
    positions = torch.randint(0, 257, (4099, 64), device="cuda", generator=gen, dtype=torch.int32)
    outputs = fd.execute([x, ids, positions])
    check(fd, outputs, [x, ids, positions])
    assert torch.equal(outputs[0].view(torch.uint8), x[ids].view(torch.uint8))
    with pytest.raises(InputError):
        fd.execute([x, torch.full_like(ids, 4099), positions])
    assert torch.equal(
        fd.execute([x, ids, positions])[0].view(torch.uint8), x[ids].view(torch.uint8)
    )


@pytest.mark.gpu
def test_cupy_cannot_hold_float8_outputs() -> None:
    cupy = pytest.importorskip("cupy")
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], dtype=DataType.Float)
        fd.add_output(fd.ops.cast(x, E4M3))
    with pytest.raises(InputError, match="CuPy has no Float8_e4m3fn"):
        fd.execute([cupy.ones(8, cupy.float32)])
