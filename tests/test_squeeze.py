"""fd.ops.squeeze of an axis whose size the definition leaves symbolic (-1) and the call
makes 1, as nvFuser's squeeze accepts it (it checks the extent when it concretizes the
fusion): accepted where the fusion is defined, checked on every call (an InputError before
anything is compiled or launched, whatever was cached), and scheduled in the same segments
as a squeeze of a broadcast axis (a view of its operand, never a copy of its own). Also
squeeze_expanded, and the campaign's draws. On the host emulator (NumPy inputs); the GPU
test at the end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings

import kfuse.engine.executor as executor_module
from gpu_support import cuda_torch, requires_gpu
from kfuse.campaign.property import Example, ExampleSpace, examples
from kfuse.campaign.property import check as check_example
from kfuse.dtypes import DataType
from kfuse.errors import DefinitionError, InputError
from kfuse.frontend import FusionDefinition
from kfuse.ir import SqueezeOp
from kfuse.reference import evaluate
from kfuse.testing import assert_outputs_close, inputs_for
from reference_checks import check, rand


def test_a_symbolic_axis_is_squeezed_where_the_fusion_is_defined() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        y = fd.ops.squeeze(x, [-2])
        fd.add_output(y)
    assert y.ndim == 2
    expr = y.definition
    assert isinstance(expr, SqueezeOp)
    assert expr.dims == (1,) and expr.expanded == ()
    assert fd.fusion.infer_shapes([(3, 1, 4)])[y] == (3, 4)


def test_an_axis_of_a_known_size_other_than_one_is_a_definition_error() -> None:
    """A fixed size of 3 can never be squeezed (nvFuser refuses it too); a fixed 1 can (a
    gather along an axis of a broadcast index has one)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 3], dtype=DataType.Float)
        with pytest.raises(DefinitionError, match=r"squeeze: axis 1 of T0 .* has size 3"):
            fd.ops.squeeze(x, [1])
        with pytest.raises(DefinitionError, match="squeeze_expanded must be a bool"):
            fd.ops.squeeze(x, [0], squeeze_expanded=1)
        labels = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        index = fd.ops.broadcast(labels, [False, True])
        picked = fd.ops.gather(x, index, 1)
        assert not picked.axes[1].is_broadcast and picked.axes[1].extent == 1
        fd.add_output(fd.ops.squeeze(picked, [1]))


def test_the_printed_definition_rebuilds_the_squeezes() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        n = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.squeeze(x, [1]))
        wide = fd.ops.expand(fd.ops.broadcast(fd.ops.exp(x), [False, True, False]), [-1, n, -1])
        fd.add_output(fd.ops.squeeze(wide, [1], squeeze_expanded=True))
    text = str(fd)
    assert "fd.ops.squeeze(T0, dims=[1])" in text  # the default left out, as nvFuser prints
    assert "dims=[1], squeeze_expanded=True)" in text
    namespace: dict = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, namespace)
    assert str(namespace["fd"]) == text


def _pointwise(fd: FusionDefinition, size_one: int) -> None:
    """A squeeze of an input and one of a value computed from it, then element-wise work
    with an input of the squeezed rank."""
    x = fd.define_tensor(shape=[-1, size_one, -1], dtype=DataType.Float)
    y = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
    fd.add_output(fd.ops.mul(fd.ops.squeeze(x, [1]), y))
    fd.add_output(fd.ops.add(fd.ops.squeeze(fd.ops.exp(x), [1]), 1.0))


def _reduction(fd: FusionDefinition, size_one: int) -> None:
    """Squeezed values reduced along each remaining axis (inner and outer reductions)."""
    x = fd.define_tensor(shape=[-1, size_one, -1], dtype=DataType.Float)
    s = fd.ops.squeeze(fd.ops.mul(x, 2.0), [1])
    fd.add_output(fd.ops.sum(s, [1]))
    fd.add_output(fd.ops.max(fd.ops.squeeze(x, [1]), [0]))


def _softmax(fd: FusionDefinition, size_one: int) -> None:
    x = fd.define_tensor(shape=[-1, size_one, -1], dtype=DataType.Float)
    fd.add_output(fd.ops.softmax(fd.ops.squeeze(x, [1]), 1))


def _epilogue(fd: FusionDefinition, size_one: int) -> None:
    """A reduction's result times a [N, 1] input squeezed to [N]."""
    x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
    scale = fd.define_tensor(shape=[-1, size_one], dtype=DataType.Float)
    fd.add_output(fd.ops.mul(fd.ops.sum(x, [1]), fd.ops.squeeze(scale, [1])))


def _transpose(fd: FusionDefinition, size_one: int) -> None:
    x = fd.define_tensor(shape=[-1, size_one, -1], dtype=DataType.Float)
    fd.add_output(fd.ops.permute(fd.ops.squeeze(fd.ops.exp(x), [1]), [1, 0]))


FUSIONS: dict[str, tuple[Callable[[FusionDefinition, int], None], list[tuple[int, ...]]]] = {
    "pointwise": (_pointwise, [(64, 1, 96), (64, 96)]),
    "reduction": (_reduction, [(48, 1, 80)]),
    "softmax": (_softmax, [(32, 1, 200)]),
    "epilogue": (_epilogue, [(40, 70), (40, 1)]),
    "transpose": (_transpose, [(64, 1, 96)]),
}


@pytest.mark.parametrize("name", sorted(FUSIONS))
def test_symbolic_squeezes_run_as_broadcast_ones(name: str) -> None:
    """Right on the emulator, in the same segments with the same schedulers as the fusion
    whose squeezed axes are broadcast ones: the squeeze is a view of the kernel's operand
    (index 0 along the axis), no copy and no segment of its own."""
    body, shapes = FUSIONS[name]
    inputs = [rand(shape, seed=k) for k, shape in enumerate(shapes)]
    segments = []
    for size_one in (-1, 1):
        with FusionDefinition() as fd:
            body(fd, size_one)
        check(fd, inputs)
        segments.append([s.scheduler for s in fd.segments(inputs)])
    assert segments[0] == segments[1]


def _cross_entropy(fd: FusionDefinition) -> None:
    """Mean cross entropy as models write it: log_softmax of the logits, each row's value at
    its target (a [N, 1] index of symbolic shape) taken along the classes, the size-1 axis
    squeezed, the mean negated."""
    logits = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
    targets = fd.define_tensor(shape=[-1, -1], dtype=DataType.Int)
    logp = fd.ops.log_softmax(fd.ops.cast(logits, DataType.Float), 1)
    picked = fd.ops.squeeze(fd.ops.take_along_axis(logp, targets, 1), [1])
    fd.add_output(fd.ops.neg(fd.ops.mean(picked, [0])))


def _cross_entropy_inputs(n: int, classes: int, targets_width: int = 1) -> list[Any]:
    rng = np.random.default_rng(1)
    logits = rand((n, classes), seed=2, dtype=ml_dtypes.bfloat16)
    return [logits, rng.integers(0, classes, (n, targets_width))]


def test_cross_entropy_squeezes_its_picked_column() -> None:
    with FusionDefinition() as fd:
        _cross_entropy(fd)
    logits, targets = inputs = _cross_entropy_inputs(96, 130)
    (loss,) = check(fd, inputs)
    x = logits.astype(np.float64)
    logp = x - x.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    expected = -np.take_along_axis(logp, targets, 1).mean()
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)


def test_the_cross_entropy_benchmarks_gather_then_squeeze() -> None:
    """nvFuser's cross-entropy benchmark broadcasts 1-D labels to [N, 1], gathers along the
    classes and squeezes that axis (of size 1 by the definition): per-row losses."""
    with FusionDefinition() as fd:
        logits = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        labels = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        x = fd.ops.cast(logits, DataType.Float)
        top = fd.ops.max(x, [1])
        rows = [fd.ops.size(logits, 0), 1]
        shifted = fd.ops.sub(x, fd.ops.broadcast_in_dim(top, shape=rows, broadcast_dims=[0]))
        lse = fd.ops.add(fd.ops.log(fd.ops.sum(fd.ops.exp(shifted), [1])), top)
        index = fd.ops.broadcast_in_dim(labels, shape=rows, broadcast_dims=[0])
        target = fd.ops.squeeze(fd.ops.gather(logits, index, 1), [1])
        loss = fd.ops.sub(lse, fd.ops.cast(target, DataType.Float))
        fd.add_output(fd.ops.cast(loss, DataType.BFloat16))
    logits, targets = _cross_entropy_inputs(64, 200)
    check(fd, [logits, targets[:, 0]])


def test_an_extent_other_than_one_is_an_input_error_before_anything_compiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The error names the op, the axis and its size, and the reference evaluator raises it
    too. A call with size 1 first compiles and caches its program; the call with size 2
    after it gets the error, not that program, and compiles nothing; size 1 runs again."""
    compiled: list[Any] = []

    def counting(*args: Any, **kw: Any) -> Any:
        compiled.append(args)
        return real(*args, **kw)

    real = executor_module.compile_fusion
    monkeypatch.setattr(executor_module, "compile_fusion", counting)
    with FusionDefinition() as fd:
        _cross_entropy(fd)
    good = _cross_entropy_inputs(32, 50)
    wide = _cross_entropy_inputs(32, 50, targets_width=2)
    message = r"squeeze\(T\d+, dims=\[1\]\): axis 1 of T\d+ has size 2 \(from input 1 \(T1\)"
    first = check(fd, good)
    assert len(compiled) == 1
    with pytest.raises(InputError, match=message):
        fd.execute(wide)
    with pytest.raises(InputError, match=message):
        evaluate(fd.fusion, wide)
    assert len(compiled) == 1
    np.testing.assert_array_equal(check(fd, good)[0], first[0])

    with FusionDefinition() as fresh:
        _cross_entropy(fresh)
    with pytest.raises(InputError, match=message):
        fresh.execute(wide)  # on the first call: nothing compiled, nothing to run
    assert len(compiled) == 1 and fresh.last_program() is None


def test_a_squeeze_of_an_input_checks_the_input_on_each_call() -> None:
    with FusionDefinition() as fd:
        _pointwise(fd, -1)
    x, y = rand((8, 1, 5)), rand((8, 5), seed=1)
    check(fd, [x, y])
    with pytest.raises(InputError, match="axis 1 of T0 has size 3"):
        fd.execute([np.repeat(x, 3, axis=1), y])
    with pytest.raises(InputError, match="axis 1 of T0 has size 0"):
        fd.execute([x[:, :0], y])


def test_squeeze_expanded_removes_an_expanded_axis_of_any_size() -> None:
    """nvFuser refuses to squeeze a broadcast axis that an expand gave an extent, unless
    squeeze_expanded: then it goes whatever its size (its values are all the same), also
    through element-wise ops and permutes."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 1], dtype=DataType.Float)
        n = fd.define_scalar(dtype=DataType.Int)
        wide = fd.ops.neg(fd.ops.expand(fd.ops.exp(x), [-1, n]))
        moved = fd.ops.permute(wide, [1, 0])
        with pytest.raises(DefinitionError, match="squeeze_expanded=True removes it"):
            fd.ops.squeeze(moved, [0])
        fd.add_output(fd.ops.squeeze(moved, [0], squeeze_expanded=True))
        fd.add_output(wide)
    x = rand((6, 1))
    out = check(fd, [x, 7])
    np.testing.assert_allclose(out[0], -np.exp(x[:, 0]), rtol=1e-6)
    assert out[1].shape == (6, 7)
    torch = pytest.importorskip("torch")  # the reference's torch backend squeezes by reshape
    check(fd, [torch.from_numpy(x), 5])


def test_an_expanded_axis_beside_a_real_one_is_real() -> None:
    """Added to an input's symbolic axis, an expanded axis makes a real one: squeezed (the
    flag changes nothing then), it must be of size 1 on the call."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 1], dtype=DataType.Float)
        full = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        n = fd.define_scalar(dtype=DataType.Int)
        mixed = fd.ops.add(fd.ops.expand(x, [-1, n]), full)
        fd.add_output(fd.ops.squeeze(mixed, [1], squeeze_expanded=True))
    x = rand((6, 1))
    check(fd, [x, rand((6, 1), seed=1), 1])
    with pytest.raises(InputError, match=r"axis 1 of T\d+ has size 3"):
        fd.execute([x, rand((6, 3), seed=1), 3])


def test_generated_inputs_give_squeezed_axes_size_one() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.squeeze(fd.ops.exp(x), [2]), y))

    @settings(max_examples=50, database=None)
    @given(inputs_for(fd, long_axis=True))
    def fits(ins: list) -> None:
        fd.fusion.infer_shapes(ins)  # an InputError would fail here
        assert ins[0].shape[2] == 1

    fits()


def test_the_campaign_draws_squeezes_of_symbolic_axes() -> None:
    """Squeezed inputs and values computed from them, in fusions of each kind: one found
    passes the campaign's check on the emulator."""

    def symbolic_squeeze(example: Example) -> bool:
        return any(
            isinstance(e, SqueezeOp) and not e.inputs[0].axes[e.dims[0]].is_broadcast
            for e in example.fd.fusion.exprs
        )

    search = settings(
        max_examples=500,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    for kind in ("pointwise", "reduction", "normalization"):
        space = ExampleSpace(kinds=(kind,), framework="numpy", device="cpu", max_elements=4096)
        check_example(find(examples(space), symbolic_squeeze, settings=search))


@requires_gpu
def test_cross_entropy_on_the_gpu() -> None:
    """The squeeze in the kernels on the GPU: right, and a [N, 2] target an InputError that
    leaves the cached program and the CUDA context working."""
    torch = cuda_torch()
    with FusionDefinition() as fd:
        _cross_entropy(fd)
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn((4096, 32000), device="cuda", generator=gen).to(torch.bfloat16)
    targets = torch.randint(0, 32000, (4096, 1), device="cuda", generator=gen)
    inputs = [logits, targets]
    expected = torch.nn.functional.cross_entropy(logits.float(), targets[:, 0])
    (loss,) = fd.execute(inputs)
    assert_outputs_close(fd, [loss], evaluate(fd.fusion, inputs), inputs)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(InputError, match="axis 1 of T1 has size 2"):
        fd.execute([logits, targets.repeat(1, 2)])
    torch.testing.assert_close(fd.execute(inputs)[0], expected, rtol=1e-5, atol=1e-5)
