"""Cats whose parts are whole vectors along the inner axis, the form a partial rotary
embedding takes (cat(rotated halves of the first n features, the rest), n a multiple of the
vector): the pointwise kernel picks a vector's part once and runs its lanes with that part
alone (codegen.windowed.vector_part_selector). Random ranks, outer sizes, part widths, dtypes
and element-wise work in the parts, against the reference (KFUSE_HYPOTHESIS_PROFILE=campaign
runs it long, as the emulator campaigns of this kernel form did on each device profile)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfuse.dtypes import DataType
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close
from source_corpus import recorded_sources

torch = pytest.importorskip("torch")

LANES = {DataType.Float: 4, DataType.BFloat16: 8, DataType.Half: 8}
"""Elements of a 16-byte vector: part widths are multiples of it."""


PER_LANE = re.compile(r"_body\([^;]*kf::window_in(?:32)?\(i0 \+ j")
"""A lane's window check in an element call: the part chosen per lane (64 or 32 bits)."""


@st.composite
def rotary_cases(draw: st.DrawFn) -> dict:
    dtype = draw(st.sampled_from(sorted(LANES, key=lambda d: d.name)))
    lanes = LANES[dtype]
    n = lanes * draw(st.sampled_from([1, 2, 4]))  # each rotated half
    rest = lanes * draw(st.integers(0, 6))
    outer = [draw(st.integers(1, 5)) for _ in range(draw(st.integers(1, 3)))]
    return {
        "dtype": dtype,
        "shape": [*outer, 2 * n + rest],
        "n": n,
        "work": draw(st.sampled_from(["rotate", "scale", "mixed"])),
        "after": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


def rotary(case: dict) -> FusionDefinition:
    """cat(first, second, x[..., 2n:]) along the last axis, first and second computed from
    x's first two n-wide windows (and a table broadcast over the outer axes for "rotate")."""
    shape, n, dtype = case["shape"], case["n"], case["dtype"]
    rank = len(shape)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * rank, contiguity=[True] * rank, dtype=dtype)
        table = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
        sizes = [fd.ops.size(x, i) for i in range(rank)]

        def window(lo: int, hi: int) -> object:
            return fd.ops.slice(x, [0] * (rank - 1) + [lo], [*sizes[:-1], hi])

        x1 = fd.ops.cast(window(0, n), DataType.Float)
        x2 = fd.ops.cast(window(n, 2 * n), DataType.Float)
        t = fd.ops.cast(fd.ops.broadcast(table, [True] * (rank - 1) + [False]), DataType.Float)
        if case["work"] == "rotate":
            first = fd.ops.sub(fd.ops.mul(x1, t), x2)
            second = fd.ops.add(fd.ops.mul(x2, t), x1)
        elif case["work"] == "scale":
            first, second = fd.ops.mul(x1, 2.0), fd.ops.neg(x2)
        else:
            first, second = fd.ops.exp(fd.ops.neg(fd.ops.abs(x2))), fd.ops.mul(x1, t)
        rest = window(2 * n, shape[-1])
        parts = [fd.ops.cast(first, dtype), fd.ops.cast(second, dtype), rest]
        out = fd.ops.cat(parts, dim=rank - 1)
        if case["after"]:
            out = fd.ops.cast(fd.ops.mul(fd.ops.abs(out), 3.0), dtype)
        fd.add_output(out)
    return fd


@settings(deadline=None, suppress_health_check=list(HealthCheck))
@given(rotary_cases())
def test_whole_vector_parts_match_the_reference(case: dict) -> None:
    fd = rotary(case)
    rng = np.random.default_rng(case["seed"])
    torch_dtype = {DataType.Float: torch.float32, DataType.BFloat16: torch.bfloat16}.get(
        case["dtype"], torch.float16
    )
    x = torch.from_numpy(rng.standard_normal(case["shape"]).astype(np.float32)).to(torch_dtype)
    table = torch.from_numpy(rng.standard_normal(case["n"]).astype(np.float32)).to(torch_dtype)
    found: list[tuple[str, str]] = []
    with recorded_sources(found):  # a definition of its own: no kernel is loaded for it
        try:
            rotary(case).execute([x, table])
        except Exception:  # noqa: BLE001, S110 - its source is the point
            pass
    # Whole-vector parts are never chosen per lane (a cat of equal parts at the output is
    # written part by part instead, with no choice at all).
    assert not any(PER_LANE.search(source) for _, source in found)
    (actual,) = fd.execute([x, table])
    (expected,) = evaluate(fd, [x, table])
    assert_outputs_close(fd, [actual], [expected], [x, table])


@pytest.mark.parametrize("dtype", [DataType.BFloat16, DataType.Float])
def test_the_parts_load_their_reads_into_shared_slots(
    dtype: DataType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each vector loads only its part's reads, into register slots the parts share
    (codegen.windowed.PartSlots): the rotated parts read three vectors each (their halves of
    x and the table) and the rest one, so three slots serve seven reads. The same results
    with the switch off, bit for bit."""
    from kfuse import switches

    case = {"dtype": dtype, "shape": [3, 5, 2 * 2 * LANES[dtype] + 3 * LANES[dtype]]}
    case |= {"n": 2 * LANES[dtype], "work": "rotate", "after": False, "seed": 7}
    rng = np.random.default_rng(7)
    torch_dtype = torch.bfloat16 if dtype is DataType.BFloat16 else torch.float32
    x = torch.from_numpy(rng.standard_normal(case["shape"]).astype(np.float32)).to(torch_dtype)
    table = torch.from_numpy(rng.standard_normal(case["n"]).astype(np.float32)).to(torch_dtype)

    def source_and_result() -> tuple[str, object]:
        found: list[tuple[str, str]] = []
        with recorded_sources(found):
            try:
                rotary(case).execute([x, table])
            except Exception:  # noqa: BLE001, S110 - its source is the point
                pass
        ((_, source),) = found
        return source, rotary(case).execute([x, table])[0]

    source, shared = source_and_result()
    assert "kf_parts[u] = " in source
    assert re.search(r"kf::Vec<[\w:]+, \d+> kf_slot2\[", source) and "kf_slot3" not in source
    # The windows that picked the part hold for all its reads: no check is loaded again.
    assert re.search(r"kf_slot\d\[u\] = kf::load_vec<", source)
    assert not re.search(r"kf_slot\d\[u\] = kf::window_load_vec<", source)
    assert "kf::window_in32(i0, " in source and "kf::window_in(" not in source
    monkeypatch.setattr(switches, "PART_LOADS_UNCHECKED", False)
    source, checked = source_and_result()
    assert re.search(r"kf_slot\d\[u\] = kf::window_load_vec<", source)
    assert torch.equal(shared, checked)
    monkeypatch.setattr(switches, "WINDOW_CHECK_32", False)
    source, checked = source_and_result()
    assert "kf::window_in(" in source and "kf::window_in32(" not in source
    assert torch.equal(shared, checked)
    monkeypatch.setattr(switches, "PART_LOCAL_LOADS", False)
    source, apart = source_and_result()
    assert "kf_parts" not in source and "kf_slot0" not in source
    assert torch.equal(shared, apart)
    (expected,) = evaluate(rotary(case), [x, table])
    assert_outputs_close(rotary(case), [shared], [expected], [x, table])


def partial_rotary() -> FusionDefinition:
    """GPT-NeoX's partial rotary over a bf16 x [B, H, S, D]: the first quarter of D rotated
    by cos and sin tables of [S, D / 8], the rest of x after it (each rotated part reads four
    vectors where D / 8 is one: x's two halves and both tables)."""
    bf16, f32 = DataType.BFloat16, DataType.Float
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * 4, contiguity=[True] * 4, dtype=bf16)
        cos, sin = (
            fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2, dtype=bf16) for _ in "cs"
        )
        b, h, s, d = (fd.ops.size(x, i) for i in range(4))
        n = fd.ops.div(d, 8)

        def window(lo: object, hi: object, dtype: DataType) -> object:
            return fd.ops.cast(fd.ops.slice(x, [0, 0, 0, lo], [b, h, s, hi]), dtype)

        x1, x2 = window(0, n, f32), window(n, fd.ops.mul(n, 2), f32)
        c, t = (
            fd.ops.cast(fd.ops.broadcast(v, [True, True, False, False]), f32) for v in (cos, sin)
        )
        first = fd.ops.cast(fd.ops.sub(fd.ops.mul(x1, c), fd.ops.mul(x2, t)), bf16)
        second = fd.ops.cast(fd.ops.add(fd.ops.mul(x2, c), fd.ops.mul(x1, t)), bf16)
        fd.add_output(fd.ops.cat([first, second, window(fd.ops.mul(n, 2), d, bf16)], dim=3))
    return fd


def _partial_rotary_sources(shape: tuple[int, int, int, int]) -> list[str]:
    """The kernel sources of partial_rotary over an x of `shape` on an H200, planned as for
    the GPU without arrays (as tools/kernel_sass.py plans a model-suite case)."""
    from kfuse.engine import compiler
    from planning import gpu_info

    fd = partial_rotary()
    fusion = compiler.stage_canonicalize(fd.fusion)  # what the executor schedules
    table = (shape[2], shape[3] // 8)
    info = gpu_info(SimpleNamespace(fusion=fusion), [shape, table, table], "h200")
    found: list[tuple[str, str]] = []
    with recorded_sources(found):
        compiler.compile_fusion(fusion, info, None, segment=True)
    return [source for _, source in found]


def test_heavy_part_slots_take_one_vector_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel whose part slots two vectors a thread would hold in more than 24 registers
    (rope_partial's four of 16 bytes: 32) takes one vector a thread, its launch bounds asking
    for the blocks an SM of 48 registers a thread (10 of 128 threads:
    switches.PART_SLOTS_ONE_VECTOR); with the switch off, two vectors and the register fit's
    bounds."""
    from kfuse import switches

    (source,) = _partial_rotary_sources((8, 32, 4096, 128))
    assert "kf_slot3[1]" in source and "kf_parts[2]" not in source
    assert re.search(r"__launch_bounds__\(128, 10\)", source)
    monkeypatch.setattr(switches, "PART_SLOTS_ONE_VECTOR", False)
    (source,) = _partial_rotary_sources((8, 32, 4096, 128))
    assert "kf_slot3[2]" in source and "kf_parts[2]" in source
    assert re.search(r"__launch_bounds__\(128\)", source)


def test_heavy_part_slots_match_the_reference() -> None:
    """The one-vector kernel of heavy part slots, with its 48-register launch bounds, on the
    emulator: the partial rotary's bits are its own with the switches off (the checked
    loads, two vectors where the size allows) and close to the reference."""
    from kfuse import switches

    rng = np.random.default_rng(11)
    x = torch.from_numpy(rng.standard_normal((2, 3, 5, 64)).astype(np.float32))
    angles = rng.standard_normal((5, 8)).astype(np.float32)
    inputs = [x.bfloat16(), *(torch.from_numpy(f(angles)).bfloat16() for f in (np.cos, np.sin))]
    found: list[tuple[str, str]] = []
    with recorded_sources(found):
        try:
            partial_rotary().execute(inputs)
        except Exception:  # noqa: BLE001, S110 - its source is the point
            pass
    ((_, source),) = found
    assert re.search(r"__launch_bounds__\(\d+, \d+\)", source) and "kf_slot3[1]" in source
    fd = partial_rotary()
    (actual,) = fd.execute(inputs)
    (expected,) = evaluate(fd, inputs)
    assert_outputs_close(fd, [actual], [expected], inputs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(switches, "PART_SLOTS_ONE_VECTOR", False)
        patch.setattr(switches, "PART_LOADS_UNCHECKED", False)
        patch.setattr(switches, "WINDOW_CHECK_32", False)
        (before,) = partial_rotary().execute(inputs)
    assert torch.equal(actual, before)


@pytest.mark.extended  # NVRTC: CI's extended step
def test_heavy_part_slots_compile_to_torch_compiles_registers() -> None:
    """The partial rotary's kernel at the suite's size, compiled as the CUDA backend compiles
    it for sm_90 (the register fit included), takes at most the 48 registers a thread of
    torch.compile's kernel (10 blocks of 128 threads an SM) and spills nothing."""
    from kfuse.runtime.backends.cubin_info import frame_bytes, registers
    from kfuse.runtime.backends.cuda import fitted_compile, nvrtc_options
    from test_dump_binaries import nvrtc_or_skip

    nvrtc_or_skip()
    (source,) = _partial_rotary_sources((8, 32, 4096, 128))
    name = re.search(r"void __launch_bounds__\([^)]*\) (\w+)\(", source)
    assert name is not None
    _, cubin = fitted_compile(source, name.group(1), "sm_90", nvrtc_options())
    assert registers(cubin) <= 48 and frame_bytes(cubin) == 0
