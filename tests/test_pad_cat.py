"""fd.ops.pad and fd.ops.cat: nvFuser's checks where the fusion is defined, sizes per call,
and the values, run as new arrays between kernels (kfuse.schedule.expr_eval) on the host
emulator; the GPU test at the end."""

from __future__ import annotations

import numpy as np
import pytest

from exact_fma import exact_fma
from gpu_support import cuda_torch, requires_gpu
from kfuse.dtypes import DataType
from kfuse.engine.program import KernelProgram
from kfuse.errors import DefinitionError, InputError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close
from reference_checks import check, rand


def test_bad_pads_and_cats_are_definition_errors() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        i = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int32)
        z = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        flag = fd.define_scalar(None, dtype=DataType.Bool)
        with pytest.raises(DefinitionError, match="an even number of widths"):
            fd.ops.pad(x, [1, 2, 3])
        with pytest.raises(DefinitionError, match="6 pad widths .* at most two an axis"):
            fd.ops.pad(x, [1] * 6)
        with pytest.raises(DefinitionError, match="pad width 1 0.5 is not an integer"):
            fd.ops.pad(x, [1, 0.5])
        with pytest.raises(DefinitionError, match="is not of the kind of"):
            fd.ops.pad(x, [1, 1], flag)
        with pytest.raises(DefinitionError, match="1.5 is not an integer"):
            fd.ops.pad(i, [1, 1], 1.5)
        with pytest.raises(DefinitionError, match="differ in dtype"):
            fd.ops.cat([x, i], dim=0)
        with pytest.raises(DefinitionError, match="differ in rank"):
            fd.ops.cat([x, z], dim=0)
        with pytest.raises(DefinitionError, match="non-empty list"):
            fd.ops.cat([], dim=0)
        with pytest.raises(DefinitionError, match="manual_padding=True"):
            fd.ops.cat([x, x], dim=0, manual_padding=True)
        with pytest.raises(DefinitionError, match="cat: dim 2 is out of range for T0"):
            fd.ops.cat([x, x], dim=2)
        assert fd.ops.pad(x, [0, 0, 0, 0]) is x
        assert fd.ops.cat([x], dim=1) is x
        fd.add_output(x)


def test_the_printed_definition_rebuilds_pad_and_cat() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        s = fd.define_scalar(None, dtype=DataType.Int)
        p = fd.ops.pad(x, [1, s], 2.5)
        fd.add_output(fd.ops.cat([p, p], dim=-1))
    text = repr(fd)
    assert "fd.ops.pad(T0, pad_widths=[1, S0, 0, 0], value=2.5)" in text
    assert "fd.ops.cat([T1, T1], dim=1)" in text
    namespace: dict = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, namespace)
    assert repr(namespace["fd"]) == text


@pytest.mark.parametrize(
    "widths", [[1, 2], [0, 0, 3, 1], [2, 0, 0, 2], [-1, 2], [0, 0, -2, -1], [-3, 4, 1, -1]]
)
def test_pads_widen_and_crop_as_torch_pad_does(widths: list[int]) -> None:
    """torch.nn.functional.pad's order (the last axis first) and its negative widths."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.pad(x, widths, -1.0), 1.0))
    x = rand((5, 6))
    (out,) = check(fd, [x])
    pairs = [(widths[2 * k], widths[2 * k + 1]) for k in range(len(widths) // 2)][::-1]
    pairs = [(0, 0)] * (2 - len(pairs)) + pairs
    want = np.full(
        [5 + lo + hi if i == 0 else 6 + lo + hi for i, (lo, hi) in enumerate(pairs)],
        -1.0,
        np.float32,
    )
    src = tuple(slice(max(0, -lo), n - max(0, -hi)) for (lo, hi), n in zip(pairs, (5, 6)))
    dst = tuple(
        slice(max(0, lo), max(0, lo) + (s.stop - s.start)) for (lo, _), s in zip(pairs, src)
    )
    want[dst] = x[src]
    np.testing.assert_array_equal(out, want + 1.0)


def test_widths_from_scalar_inputs_resize_each_call() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], dtype=DataType.Int32)
        lo = fd.define_scalar(None, dtype=DataType.Int)
        fd.add_output(fd.ops.pad(fd.ops.mul(x, 2), [lo, 1]))
    x = np.arange(4, dtype=np.int32)
    for left in (0, 3, -2):
        (out,) = check(fd, [x, left])
        assert out.shape == (4 + left + 1,)
        np.testing.assert_array_equal(out[max(0, left) : -1], (2 * x)[max(0, -left) :])
    with pytest.raises(InputError, match="axis 0 of size 4 padded by -9 before and 1 after"):
        fd.execute([x, -9])


def test_a_bool_pad_defaults_to_false() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.pad(fd.ops.gt(x, 0.0), [1, 1, 1, 1]))
    x = rand((3, 3))
    (out,) = check(fd, [x])
    assert out.dtype == np.bool_ and not out[0].any() and not out[:, 0].any()
    np.testing.assert_array_equal(out[1:-1, 1:-1], x > 0)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cat_joins_inputs_and_computed_values_along_any_axis(dim: int) -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        joined = fd.ops.cat([fd.ops.exp(a), b, a], dim=dim)
        fd.add_output(fd.ops.sum(joined, dims=[dim]))
        fd.add_output(joined)
    shape_a = [2, 3, 4]
    shape_b = list(shape_a)
    shape_b[dim] = 5
    a, b = rand(tuple(shape_a)), rand(tuple(shape_b), 1)
    summed, joined = check(fd, [a, b])
    np.testing.assert_allclose(joined, np.concatenate([np.exp(a), b, a], axis=dim), rtol=1e-6)


def test_cat_of_inputs_that_differ_off_its_axis_is_an_input_error() -> None:
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.cat([a, b], dim=0))
    with pytest.raises(InputError, match="axis 1 of T1 has size 4 but T0's has 3"):
        fd.execute([rand((2, 3)), rand((2, 4))])


def test_rope_with_cat_as_nvfuser_writes_it() -> None:
    """The rotation of nvFuser's RoPE benchmark with cat: cat(-x2, x1) of the halves of the
    last axis, times sin, plus x times cos: one kernel."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.Float)
        cos = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        sin = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        b, h, s, d = (fd.ops.size(x, i) for i in range(4))
        half = fd.ops.div(d, 2)
        x1 = fd.ops.slice(x, [0, 0, 0, 0], [b, h, s, half])
        x2 = fd.ops.slice(x, [0, 0, 0, half], [b, h, s, d])
        rotated = fd.ops.cat([fd.ops.neg(x2), x1], dim=-1)
        c = fd.ops.broadcast(cos, [True, True, False, False])
        n = fd.ops.broadcast(sin, [True, True, False, False])
        fd.add_output(fd.ops.add(fd.ops.mul(x, c), fd.ops.mul(rotated, n)))
    x, cos, sin = rand((2, 3, 8, 16)), rand((8, 16), 1), rand((8, 16), 2)
    (out,) = check(fd, [x, cos, sin])
    rot = np.concatenate([-x[..., 8:], x[..., :8]], axis=-1)
    np.testing.assert_allclose(out, x * cos + rot * sin, rtol=1e-5, atol=1e-6)
    # The multiply and add move into the cat's parts (each reading its windows of x, cos and
    # sin), and one kernel writes both parts into their halves of the output.
    program = fd.last_program()
    assert isinstance(program, KernelProgram) and len(program.launches) == 1


@pytest.mark.gpu
@requires_gpu
def test_pad_and_cat_on_the_gpu() -> None:
    """Between kernels on the GPU, with torch tensors: right against the reference."""
    torch = cuda_torch()
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        joined = fd.ops.cat([fd.ops.cast(fd.ops.exp(a), DataType.BFloat16), b], dim=1)
        fd.add_output(fd.ops.pad(joined, [3, -2, 1, 0], 0.5))
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((300, 200), device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn((300, 72), device="cuda", generator=gen).to(torch.bfloat16)
    for _ in range(3):
        inputs = [a, b]
        assert_outputs_close(fd, fd.execute(inputs), evaluate(fd.fusion, inputs), inputs)


def test_cats_that_no_one_kernel_writes_still_run_between_kernels() -> None:
    """Parts of different sizes (two output shapes), a cat feeding a sum, and one beside a
    reduction's result: each right, through segments and the framework's cat."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        joined = fd.ops.cat([fd.ops.exp(a), b], dim=1)
        fd.add_output(fd.ops.mul(joined, 2.0))
        fd.add_output(fd.ops.sum(joined, dims=[1]))
        rows = fd.ops.broadcast(fd.ops.sum(a, dims=[1]), [False, True])
        fd.add_output(fd.ops.add(fd.ops.cat([a, a], dim=0), fd.ops.cat([rows, rows], dim=0)))
    a, b = rand((4, 5)), rand((4, 3), 1)
    doubled, summed, shifted = check(fd, [a, b])
    joined = np.concatenate([np.exp(a), b], axis=1)
    np.testing.assert_allclose(doubled, 2 * joined, rtol=1e-6)
    np.testing.assert_allclose(summed, joined.sum(1), rtol=1e-5)
    np.testing.assert_allclose(
        shifted, np.concatenate([a, a]) + np.tile(a.sum(1, keepdims=True), (2, 1)), rtol=1e-5
    )


def test_a_cat_of_a_computed_half_and_a_view_is_one_kernel() -> None:
    """cat(exp(x1), x2) of x's halves: the kernel computes one part and copies the other
    (a view of x) into their halves of the output."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        rows, width = fd.ops.size(x, 0), fd.ops.size(x, 1)
        half = fd.ops.div(width, 2)
        x1 = fd.ops.slice(x, [0, 0], [rows, half])
        x2 = fd.ops.slice(x, [0, half], [rows, width])
        fd.add_output(fd.ops.cat([fd.ops.exp(x1), x2], dim=1))
    x = rand((6, 16))
    (out,) = check(fd, [x])
    np.testing.assert_allclose(out, np.concatenate([np.exp(x[:, :8]), x[:, 8:]], 1), rtol=1e-6)
    program = fd.last_program()
    assert isinstance(program, KernelProgram) and len(program.launches) == 1


def test_partial_rotary_cats_flatten_and_stay_right() -> None:
    """Llama's partial rotary: cat(cat(rotated halves), the rest) along one axis flattens to
    one cat of three parts (the canonical form); parts of two sizes, one a view of x. One
    pointwise kernel computes the cat: each element the part it falls in."""
    from kfuse.ir.canonicalize import canonical_fusion

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        cos = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        sin = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        b, s, d = (fd.ops.size(x, i) for i in range(3))
        x1 = fd.ops.slice(x, [0, 0, 0], [b, s, 4])
        x2 = fd.ops.slice(x, [0, 0, 4], [b, s, 8])
        rest = fd.ops.slice(x, [0, 0, 8], [b, s, d])
        c = fd.ops.broadcast(cos, [True, False, False])
        n = fd.ops.broadcast(sin, [True, False, False])
        first = fd.ops.sub(fd.ops.mul(x1, c), fd.ops.mul(x2, n))
        second = fd.ops.add(fd.ops.mul(x2, c), fd.ops.mul(x1, n))
        fd.add_output(fd.ops.cat([fd.ops.cat([first, second], dim=-1), rest], dim=-1))
    (cat,) = [e for e in canonical_fusion(fd.fusion).exprs if type(e).__name__ == "CatOp"]
    assert len(cat.inputs) == 3
    x, cos, sin = rand((2, 5, 20)), rand((5, 4), 1), rand((5, 4), 2)
    (out,) = check(fd, [x, cos, sin])
    x1, x2 = x[..., :4], x[..., 4:8]
    # The same float32 operations in the same order, each sum of two products one fma of its
    # left product (kfuse.codegen.contraction): the same bits.
    first, second = exact_fma(x1, cos, -(x2 * sin)), exact_fma(x2, cos, x1 * sin)
    want = np.concatenate([first, second, x[..., 8:]], axis=-1)
    np.testing.assert_array_equal(out, want)
    # One kernel over the cat's output, no cat between kernels, and x itself untouched.
    program = fd.last_program()
    assert isinstance(program, KernelProgram)
    assert program.schedulers() == [SchedulerType.pointwise]
    np.testing.assert_array_equal(x, rand((2, 5, 20)))


def test_cats_of_reductions_and_norms_are_written_by_their_kernels() -> None:
    """Parts from other kernels than pointwise ones: row sums of two inputs (a reduction
    kernel writing each into its window), softmaxes of two inputs along their rows (inner
    persistent kernels), and a norm backward's dx beside another value (inner_outer)."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.cat([fd.ops.sum(a, dims=[1]), fd.ops.sum(b, dims=[1])], dim=0))
    a, b = rand((6, 40)), rand((3, 40), 1)
    (out,) = check(fd, [a, b])
    np.testing.assert_allclose(out, np.concatenate([a.sum(1), b.sum(1)]), rtol=1e-5)
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.cat([fd.ops.softmax(a, 1), fd.ops.softmax(b, 1)], dim=1))
    a, b = rand((6, 40)), rand((6, 24), 1)
    (out,) = check(fd, [a, b])

    def softmax(v: np.ndarray) -> np.ndarray:
        e = np.exp(v - v.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    np.testing.assert_allclose(out, np.concatenate([softmax(a), softmax(b)], 1), rtol=1e-5)
    assert isinstance(fd.last_program(), KernelProgram)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        g = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        gx = fd.ops.mul(g, x)
        row = fd.ops.broadcast(fd.ops.sum(gx, dims=[1]), [False, True])
        dx = fd.ops.sub(g, fd.ops.mul(x, row))
        fd.add_output(fd.ops.cat([dx, fd.ops.exp(y)], dim=1))
        fd.add_output(fd.ops.sum(gx, dims=[0]))
    inputs = [rand((64, 256)), rand((64, 256), 1), rand((64, 128), 2)]
    check(fd, inputs)  # the inner_outer kernel writes dx into the cat's first window
    program = fd.last_program()
    assert isinstance(program, KernelProgram) and SchedulerType.inner_outer_persistent in (
        program.schedulers()
    )


@pytest.mark.parametrize(
    ("shape", "dim", "sum_dims"),
    [
        ((1, 3, 6), 2, [1, 2]),  # an H100 campaign's failure-1624-21: abs(x) and its sum
        ((4, 8, 16), 2, [1, 2]),  # rows of 16 at a stride of 32
        ((4, 8, 16), 1, [0, 1]),  # the part's rows of 128 at a stride of 256
    ],
)
def test_a_cat_part_that_another_kernel_reads_is_read_from_its_window(
    shape: tuple[int, ...], dim: int, sum_dims: list[int]
) -> None:
    """A part of a folded cat that a later segment reads (a sum of it) is read where the
    kernel that computed it wrote it, in its window of the cat's output, through the
    output's strides. Read as a contiguous array of its own, the sum took elements of both
    parts (the campaign's 4.93 where 15.71 is right)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1] * len(shape), dtype=DataType.Float)
        a = fd.ops.abs(x)
        fd.add_output(fd.ops.cat([a, fd.ops.neg(a)], dim=dim))
        fd.add_output(fd.ops.sum(a, dims=sum_dims))
    x = rand(shape)
    joined, summed = check(fd, [x])
    np.testing.assert_allclose(summed, np.abs(x).sum(tuple(sum_dims)), rtol=1e-5)
    np.testing.assert_array_equal(joined, np.concatenate([np.abs(x), -np.abs(x)], axis=dim))
    # Still folded: generated kernels write the parts (one, or segments merged into one
    # program that reads them back), no cat between kernels.
    assert isinstance(fd.last_program(), KernelProgram)


def test_a_sum_of_a_cat_part_made_by_a_sum_reads_its_window() -> None:
    """An H100 campaign's failure-5103-220: s = sum(x, 0), cat([s, -s], 1) and sum(s, 0),
    where the second sum read s's window as [s, -s] and gave 0."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        s = fd.ops.sum(x, dims=[0])
        fd.add_output(fd.ops.cat([s, fd.ops.neg(s)], dim=1))
        fd.add_output(fd.ops.sum(s, dims=[0]))
    for shape in [(1, 2, 1), (3, 6, 5)]:
        x = rand(shape)
        joined, total = check(fd, [x])
        np.testing.assert_allclose(total, x.sum((0, 1)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("second", ["cat", "reshape", "output"])
def test_a_value_in_two_folded_outputs_keeps_each_window(second: str) -> None:
    """A GPU campaign's failure-3139-17: cat([not(a), b], 1) beside cat([not(a), c], 0), the
    two not(a) one value once canonicalized. Both cats were folded into one kernel whose two
    outputs were that value, and the output's strides were looked up by the value: the first
    window was written with the second's row stride (half its rows twice, half never). A
    part that another output writes too (a second cat, a reshape of it, the value itself)
    leaves its cat between kernels."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        w = fd.ops.welford(x, dims=[0])[1]  # an outer persistent kernel, as the campaign's
        a = fd.ops.cast(x, dtype=DataType.Bool)
        fd.add_output(w)
        fd.add_output(fd.ops.cat([fd.ops.logical_not(a), a], dim=1))
        again = fd.ops.logical_not(a)
        if second == "cat":
            fd.add_output(fd.ops.cat([again, a], dim=0))
        elif second == "reshape":
            fd.add_output(fd.ops.reshape(again, [-1]))
        else:
            fd.add_output(again)
    x = rand((64, 16, 8))
    x[::3] = 0.0
    outs = check(fd, [x])
    mask = x != 0
    np.testing.assert_array_equal(outs[1], np.concatenate([~mask, mask], axis=1))
    want = {
        "cat": np.concatenate([~mask, mask], axis=0),
        "reshape": (~mask).reshape(-1),
        "output": ~mask,
    }[second]
    np.testing.assert_array_equal(outs[2], want)
