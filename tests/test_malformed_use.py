"""Malformed use of every public entry point: Hypothesis draws bad arguments (wrong types,
out-of-range values, foreign objects, odd arrays) and each outcome must be a correct result
or a kfuse error, never another exception. The `ci` profile draws a few dozen cases per test;
KFUSE_HYPOTHESIS_PROFILE=campaign draws thousands.

Entry points: every fd.ops op, define_tensor, define_scalar, add_output, execute (inputs,
stream, device), manual_execute (params edited to anything), the schedule API, KernelExecutor,
PythonProfiler and the campaign command's argument parsing."""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kfuse
from example_budget import examples
from kfuse import schedule
from kfuse.dtypes import DataType
from kfuse.errors import KfuseError
from kfuse.frontend import FusionDefinition
from kfuse.reference import evaluate
from kfuse.schedule import SchedulerType
from kfuse.testing import assert_outputs_close

torch = pytest.importorskip("torch")

SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))

_FOREIGN = FusionDefinition()
with _FOREIGN as _f:
    _FOREIGN_TENSOR = _f.define_tensor(shape=[-1])
    _f.add_output(_FOREIGN_TENSOR)

# Values no argument expects, and some that only look right.
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([-1, 0, 1, 2, 3]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.sampled_from(
        [
            np.int64(1),
            np.float32(0.5),
            np.bool_(True),
            np.zeros(2),
            np.array(3),
            object(),
            slice(1),
            {"a": 1},
            (1, "x"),
            [0.5, 1],
            [True, False],
            ["1", "0"],
            [None],
            [],
            [[0]],
            DataType.Float,
            "Float",
            "float64",
            _FOREIGN_TENSOR,
            b"\xff",
            math.nan,
            2**63,
            -(2**63) - 1,
        ]
    ),
    st.lists(st.integers(-3, 3), max_size=4),
)


def _ok_or_kfuse_error(call: Any) -> Any:
    """Run `call`; a kfuse error is an accepted outcome, anything else but a result fails."""
    try:
        return call()
    except KfuseError:
        return None


# ---- fd.ops ----------------------------------------------------------------------------

OPS = sorted(n for n in dir(FusionDefinition().ops) if not n.startswith("_"))


def _arguments(draw: Any, fd: FusionDefinition, op: str, vals: list) -> tuple[list, dict]:
    """Positional and keyword arguments for `op`: mostly values of this definition, some
    junk."""
    fn = getattr(fd.ops, op)
    params = list(inspect.signature(fn).parameters.values())
    good = st.sampled_from(vals)
    arg = st.one_of(good, good, JUNK)
    if params and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return draw(st.lists(arg, min_size=0, max_size=4)), {}
    args, kwargs = [], {}
    for p in params:
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            if draw(st.booleans()):
                kwargs[p.name] = draw(JUNK)
        elif p.default is inspect.Parameter.empty or draw(st.booleans()):
            args.append(draw(arg))
    return args, kwargs


@settings(max_examples=examples(60), **SETTINGS)
@given(data=st.data(), op=st.sampled_from(OPS))
def test_every_op_with_bad_arguments_raises_definition_errors(data: st.DataObject, op: str) -> None:
    with FusionDefinition() as fd:
        vals = [
            fd.define_tensor(shape=[-1, -1]),
            fd.define_tensor(shape=[-1], dtype=DataType.Int),
            fd.define_tensor(shape=[1, -1], dtype=DataType.Bool),
            fd.define_scalar(),
            fd.define_scalar(3),
            2.0,
        ]
        vals += [fd.ops.shape(vals[0])]
        args, kwargs = _arguments(data.draw, fd, op, vals)
        _ok_or_kfuse_error(lambda: getattr(fd.ops, op)(*args, **kwargs))
        fd.add_output(vals[0])


@settings(max_examples=examples(60), **SETTINGS)
@given(
    shape=JUNK,
    contiguity=JUNK,
    dtype=JUNK,
    stride_order=JUNK,
    value=JUNK,
    scalar_dtype=JUNK,
    output=JUNK,
)
def test_define_and_add_output_with_bad_arguments(
    shape: Any,
    contiguity: Any,
    dtype: Any,
    stride_order: Any,
    value: Any,
    scalar_dtype: Any,
    output: Any,
) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        _ok_or_kfuse_error(
            lambda: fd.define_tensor(
                shape=shape, contiguity=contiguity, dtype=dtype, stride_order=stride_order
            )
        )
        _ok_or_kfuse_error(lambda: fd.define_tensor(sizes=shape, strides=contiguity))
        _ok_or_kfuse_error(lambda: fd.define_scalar(value, dtype=scalar_dtype))
        _ok_or_kfuse_error(lambda: fd.add_output(output))
        fd.add_output(x)


# ---- execute ---------------------------------------------------------------------------


def _definition() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        w = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        s = fd.define_scalar(dtype=DataType.Int)
        y = fd.ops.mul(fd.ops.add(x, fd.ops.cast(w, DataType.Float)), s)
        fd.add_output(y)
        fd.add_output(fd.ops.sum(y, [1]))
    return fd


DEFINITION = _definition()


@st.composite
def _arrays(draw: Any) -> Any:
    """Small torch arrays of any dtype and rank, sometimes transposed."""
    shape = draw(st.lists(st.integers(0, 5), min_size=0, max_size=3))
    dtype = draw(
        st.sampled_from(
            [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.float64, torch.float16]
        )
    )
    t = (
        torch.zeros(shape, dtype=dtype)
        if dtype is torch.bool
        else torch.arange(math.prod(shape)).reshape(shape).to(dtype)
    )
    if t.ndim == 2 and draw(st.booleans()):
        t = t.t()  # not contiguous, against the definition's contiguity
    return t


@st.composite
def _inputs(draw: Any) -> list:
    """Input lists of the wrong length, or right but for one entry."""
    good = [torch.randn(3, 4), torch.randn(4).to(torch.bfloat16), 2]
    pick = st.one_of(st.sampled_from(good), _arrays(), JUNK, st.just(np.ones((3, 4), np.float32)))
    if draw(st.integers(0, 3)) == 0:
        return [draw(pick) for _ in range(draw(st.integers(0, 4)))]
    inputs = list(good)
    inputs[draw(st.integers(0, 2))] = draw(pick)
    return inputs


@settings(max_examples=examples(40), **SETTINGS)
@given(
    inputs=st.one_of(_inputs(), JUNK),
    stream=st.one_of(st.none(), JUNK),
    device=st.one_of(st.none(), JUNK),
)
def test_execute_with_bad_inputs_is_right_or_a_kfuse_error(
    inputs: Any, stream: Any, device: Any
) -> None:
    out = _ok_or_kfuse_error(lambda: DEFINITION.execute(inputs, stream=stream, device=device))
    if out is not None:
        assert_outputs_close(DEFINITION, out, evaluate(DEFINITION.fusion, inputs), inputs)
    _ok_or_kfuse_error(lambda: DEFINITION.segments(inputs, device=device))


PARAM_FIELDS = [
    "block_x",
    "block_y",
    "grid_x",
    "grid_y",
    "vectorize_reduction",
    "persistent_batch_size",
    "unroll_reduction",
    "cluster_size",
    "reload_batch_size",
    "unroll_iter",
    "vectorize_iter",
]


@settings(max_examples=examples(40), **SETTINGS)
@given(data=st.data(), scheduler=st.sampled_from(list(SchedulerType)))
def test_manual_execute_with_edited_params_is_right_or_a_kfuse_error(
    data: st.DataObject, scheduler: SchedulerType
) -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.softmax(x, 1) if data.draw(st.booleans()) else fd.ops.exp(x))
    inputs = [torch.randn(5, 33)]
    params = _ok_or_kfuse_error(lambda: schedule.compute_heuristics(fd.fusion, scheduler, inputs))
    if params is None:
        params = data.draw(JUNK)
    else:
        for name in data.draw(st.lists(st.sampled_from(PARAM_FIELDS), max_size=3)):
            value = data.draw(st.one_of(st.integers(-3, 2048), JUNK))
            _ok_or_kfuse_error(
                lambda n=name, v=value: setattr(params, n, v) if hasattr(params, n) else None
            )
    out = _ok_or_kfuse_error(lambda: fd.manual_execute(inputs, heuristic_params=params))
    if out is not None:
        assert_outputs_close(fd, out, evaluate(fd.fusion, inputs), inputs)


@settings(max_examples=examples(40), **SETTINGS)
@given(
    scheduler=st.one_of(st.sampled_from(list(SchedulerType)), JUNK),
    inputs=st.one_of(_inputs(), JUNK),
)
def test_the_schedule_api_with_bad_arguments(scheduler: Any, inputs: Any) -> None:
    fusion = DEFINITION.fusion
    _ok_or_kfuse_error(lambda: schedule.find_compatible_schedulers(fusion, inputs))
    _ok_or_kfuse_error(lambda: schedule.can_schedule(fusion, scheduler, inputs))
    _ok_or_kfuse_error(lambda: schedule.compute_heuristics(fusion, scheduler, inputs))


@pytest.mark.parametrize(
    ("dtype", "value"),
    [
        (DataType.Int, 2**63),
        (DataType.Int, -(2**63) - 1),
        (DataType.Int32, 2**31),
        (DataType.Int32, -(2**31) - 1),
        (DataType.Double, 10**400),
    ],
)
def test_a_scalar_input_outside_its_dtype_is_an_input_error(dtype: DataType, value: int) -> None:
    """Found by the malformed-use campaign: 2**63 for an Int scalar ran, wrapped to -2**63 in
    the emulator's kernel, a wrong result."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1])
        s = fd.define_scalar(dtype=dtype)
        fd.add_output(fd.ops.mul(x, s))
    x = torch.randn(5)
    with pytest.raises(kfuse.InputError, match="outside its range|too large"):
        fd.execute([x, value])
    lowest = -(2 ** (8 * dtype.itemsize - 1)) if dtype.is_integral else -(2.0**1000)
    (out,) = fd.execute([x, lowest])  # the range's end is accepted
    assert_outputs_close(fd, [out], evaluate(fd.fusion, [x, lowest]), [x, lowest])


def test_an_array_of_several_elements_is_no_constant() -> None:
    """Found by the malformed-use campaign: define_scalar(np.zeros(2)) raised NumPy's raw
    ValueError from .item()."""
    with FusionDefinition() as fd:
        with pytest.raises(kfuse.DefinitionError, match="is not a number"):
            fd.define_scalar(np.zeros(2), dtype=DataType.Float)
        x = fd.define_tensor(shape=[-1])
        with pytest.raises(kfuse.DefinitionError, match="expected a tensor or scalar"):
            fd.ops.add(x, np.ones(3))
        fd.add_output(fd.ops.add(x, np.float32(2.0)))  # a NumPy number is one
    x = torch.randn(3)
    torch.testing.assert_close(fd.execute([x])[0], x + 2)


# ---- the params classes' constructors ------------------------------------------------------

PARAMS_CLASSES = [
    kfuse.LaunchParams,
    kfuse.CompileParams,
    kfuse.HeuristicParams,
    kfuse.PointwiseParams,
    kfuse.ReductionParams,
]
# Every field any of them has (read from their dicts), scheduler_type among them.
CONSTRUCTOR_KEYWORDS = sorted({name for cls in PARAMS_CLASSES for name in cls().to_dict()})


@settings(max_examples=examples(60), **SETTINGS)
@given(
    cls=st.sampled_from(PARAMS_CLASSES),
    args=st.lists(st.one_of(st.sampled_from(["pointwise", "reduction"]), JUNK), max_size=2),
    kwargs=st.dictionaries(
        st.one_of(st.sampled_from(CONSTRUCTOR_KEYWORDS), st.text(max_size=3)),
        st.one_of(st.integers(-3, 2048), st.sampled_from(["int32", "sm_90", ["-lineinfo"]]), JUNK),
        max_size=3,
    ),
)
def test_params_constructors_with_bad_arguments(cls: Any, args: list, kwargs: dict) -> None:
    """A wrong type, name or count of arguments is a ParamsError naming it (it was nanobind's
    'incompatible function arguments' TypeError); what is built round-trips through to_dict."""
    params = _ok_or_kfuse_error(lambda: cls(*args, **kwargs))
    if params is not None:
        assert type(params).from_dict(params.to_dict()) == params


# ---- KernelExecutor, PythonProfiler ------------------------------------------------------


@settings(max_examples=examples(25), **SETTINGS)
@given(
    source=st.one_of(
        st.sampled_from(
            [
                'extern "C" __global__ void k(float* o) { o[0] = 1.0f; }',
                "not C++ at all {",
                'extern "C" __global__ void other() {}',
            ]
        ),
        JUNK,
    ),
    name=st.one_of(st.just("k"), JUNK),
    args=st.one_of(st.lists(JUNK, max_size=3), JUNK),
    launch=JUNK,
)
def test_kernel_executor_with_bad_arguments(source: Any, name: Any, args: Any, launch: Any) -> None:
    ex = kfuse.KernelExecutor()
    _ok_or_kfuse_error(lambda: ex.compile(source, name, kfuse.LaunchParams(block_x=32)))
    _ok_or_kfuse_error(lambda: ex.compile(source, name, launch))
    _ok_or_kfuse_error(lambda: ex.run(args, kfuse.LaunchParams(grid_x=1)))
    _ok_or_kfuse_error(lambda: ex.run([torch.zeros(1)], launch))


def test_the_profiler_works_or_is_a_kfuse_error() -> None:
    """Without a GPU or CUPTI, or with CUPTI held elsewhere, PythonProfiler is a
    ProfilerError; anything else but a profile is a bug."""

    def profile() -> None:
        with kfuse.PythonProfiler():
            DEFINITION.execute([torch.randn(3, 4), torch.randn(4).to(torch.bfloat16), 2])

    _ok_or_kfuse_error(profile)


# ---- the campaign command ----------------------------------------------------------------

OPTIONS = [
    "--device",
    "--budget",
    "--examples",
    "--kinds",
    "--dtypes",
    "--max-rank",
    "--max-ops",
    "--max-elements",
    "--special-values",
    "--seed",
    "--shard",
    "--workers",
    "--shrink-seconds",
    "--example-timeout",
    "--replay-round",
]


@settings(max_examples=examples(60), **SETTINGS)
@given(
    argv=st.lists(
        st.one_of(
            st.sampled_from(OPTIONS),
            st.text(max_size=6),
            st.integers(-5, 5).map(str),
            st.just("nan"),
        ),
        max_size=6,
    )
)
def test_campaign_arguments_parse_or_are_usage_errors(
    argv: list[str], tmp_path_factory: Any
) -> None:
    from kfuse.cli import campaign as cli

    argv = [*argv, "--out", str(tmp_path_factory.mktemp("campaign"))]  # nothing written here
    try:
        cli._campaign(argv)
    except cli.UsageError:
        pass
