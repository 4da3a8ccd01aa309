"""LaunchParams, CompileParams and HeuristicParams: built without a device, value semantics,
and a lossless to_dict/from_dict round trip."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kfuse


def test_params_construct_without_device() -> None:
    lp = kfuse.LaunchParams()
    assert lp.grid_x is None and lp.block_x is None and lp.shared_mem == 0
    assert lp.grid == (1, 1, 1) and lp.block == (1, 1, 1)
    cp = kfuse.CompileParams()
    assert cp.index_type == "int64" and cp.arch is None and cp.maxrregcount is None
    assert cp.extra_options == []


def test_launch_params_value_semantics() -> None:
    a = kfuse.LaunchParams(grid_x=4, block_x=128, shared_mem=1024)
    b = kfuse.LaunchParams(grid_x=4, block_x=128, shared_mem=1024)
    assert a == b and hash(a) == hash(b)
    assert a != kfuse.LaunchParams(grid_x=4, block_x=256)
    assert repr(a).startswith("LaunchParams(grid_x=4, ")
    assert "block_y=None" in repr(a)
    assert a.merged_with(kfuse.LaunchParams(block_x=64, grid_y=2)) == kfuse.LaunchParams(
        grid_x=4, grid_y=2, block_x=64, shared_mem=1024
    )
    assert copy.copy(a) == a and copy.copy(a) is not a
    assert a != "not params"


@pytest.mark.parametrize("field", ["grid_x", "block_z"])
def test_launch_params_reject_nonpositive_dims(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        kfuse.LaunchParams(**{field: 0})
    with pytest.raises(ValueError, match="shared_mem"):
        kfuse.LaunchParams(shared_mem=-1)


def test_compile_params_validate() -> None:
    cp = kfuse.CompileParams(
        index_type="int32", maxrregcount=64, arch="sm_90", extra_options=["-lineinfo"]
    )
    assert cp.nvrtc_options() == ["--maxrregcount=64", "-lineinfo"]
    assert cp == kfuse.CompileParams.from_dict(cp.to_dict())
    assert hash(cp) == hash(kfuse.CompileParams.from_dict(cp.to_dict()))
    with pytest.raises(ValueError, match="index_type"):
        kfuse.CompileParams(index_type="int16")
    with pytest.raises(ValueError, match="index_type"):
        cp.index_type = "float"
    with pytest.raises(ValueError, match="arch"):
        kfuse.CompileParams(arch="compute_90")


def test_heuristic_params_fields_are_read_write() -> None:
    p = kfuse.PointwiseParams(vectorization_factor=4, break_point=1)
    assert p.scheduler_type is kfuse.SchedulerType.pointwise
    assert p.vectorization_factor == 4 and p.break_point == 1 and p.block_x == 128
    p.unroll_factor = 2
    p.split_grid_y = True
    p.lparams.block_x = 256  # lparams is held by reference
    assert p.lparams.block_x == 256
    with pytest.raises(AttributeError):
        p.scheduler_type = "reduction"
    with pytest.raises(TypeError):
        kfuse.PointwiseParams(no_such_field=1)
    r = kfuse.ReductionParams("inner_persistent", persistent=True, cross_block=True)
    assert (
        r.scheduler_type is kfuse.SchedulerType.inner_persistent and r.persistent and r.cross_block
    )


def test_heuristic_params_dict_layout() -> None:
    d = kfuse.ReductionParams(block_x=32).to_dict()
    assert d["scheduler_type"] == "reduction" and d["block_x"] == 32
    assert d["fastest_dim_reduction"] is True
    assert set(d["lparams"]) == {
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "shared_mem",
    }
    assert set(d["cparams"]) == {"index_type", "maxrregcount", "arch", "extra_options"}
    for key in (
        "vectorize_iter",
        "unroll_reduction",
        "cross_grid_count",
        "cross_block_inner_reduction",
        "cross_block_outer_reduction",
        "persistent_batch_size",
    ):
        assert key in d


def test_from_dict_rejects_unknown_fields() -> None:
    d = kfuse.PointwiseParams().to_dict()
    d["bogus"] = 1
    with pytest.raises(ValueError, match="bogus"):
        kfuse.HeuristicParams.from_dict(d)
    with pytest.raises(ValueError, match="scheduler_type"):
        kfuse.HeuristicParams.from_dict({})


def test_equality_distinguishes_class_and_type() -> None:
    assert kfuse.PointwiseParams() != kfuse.ReductionParams()
    assert kfuse.ReductionParams("reduction") != kfuse.ReductionParams("inner_persistent")
    copied = copy.deepcopy(kfuse.ReductionParams(block_y=4))
    assert isinstance(copied, kfuse.ReductionParams) and copied.block_y == 4


def test_scheduler_type_is_the_scheduler_type_enum() -> None:
    """As nvFuser's HeuristicParams.scheduler_type: a SchedulerType (read-only, hashable),
    equal to the enum member; params are built from the member or its name and show it;
    to_dict keeps the name (plain data, as its lparams and cparams) and from_dict takes
    either."""
    types = kfuse.SchedulerType
    p = kfuse.PointwiseParams()
    assert p.scheduler_type == types.pointwise and p.scheduler_type is types.pointwise
    assert {types.pointwise: "found"}[p.scheduler_type] == "found"
    with pytest.raises(AttributeError):
        p.scheduler_type = types.reduction
    assert kfuse.HeuristicParams().scheduler_type is types.none
    assert repr(p).startswith("PointwiseParams(scheduler_type=SchedulerType.pointwise, ")
    r = kfuse.ReductionParams(types.inner_persistent, persistent=True)
    assert r.scheduler_type is types.inner_persistent
    by_name = kfuse.ReductionParams("inner_persistent", persistent=True)
    assert r == by_name and hash(r) == hash(by_name)
    d = r.to_dict()
    assert d["scheduler_type"] == "inner_persistent"
    assert kfuse.HeuristicParams.from_dict(d) == r
    d["scheduler_type"] = types.inner_persistent
    assert kfuse.HeuristicParams.from_dict(d) == r
    with pytest.raises(kfuse.ParamsError, match="unknown scheduler_type 'pointwize'; the types"):
        kfuse.PointwiseParams("pointwize")
    with pytest.raises(kfuse.ParamsError, match="is a ReductionParams's"):
        kfuse.PointwiseParams(types.reduction)


optional_dim = st.none() | st.integers(1, 2**31 - 1)
launch_params = st.builds(
    kfuse.LaunchParams,
    grid_x=optional_dim,
    grid_y=optional_dim,
    grid_z=optional_dim,
    block_x=optional_dim,
    block_y=optional_dim,
    block_z=optional_dim,
    shared_mem=st.integers(0, 1 << 20),
)
compile_params = st.builds(
    kfuse.CompileParams,
    index_type=st.sampled_from(["int32", "int64"]),
    maxrregcount=st.none() | st.integers(16, 255),
    arch=st.none() | st.sampled_from(["sm_80", "sm_90"]),
    extra_options=st.lists(st.sampled_from(["-lineinfo", "--use_fast_math"]), max_size=2),
)


@st.composite
def heuristic_params(draw: st.DrawFn) -> kfuse.HeuristicParams:
    cls = draw(st.sampled_from([kfuse.PointwiseParams, kfuse.ReductionParams]))
    params = cls()
    for key, value in params.to_dict().items():
        if isinstance(value, bool):
            setattr(params, key, draw(st.booleans()))
        elif isinstance(value, int):
            setattr(params, key, draw(st.integers(-1, 1 << 16)))
    params.lparams = draw(launch_params)
    params.cparams = draw(compile_params)
    return params


@given(heuristic_params())
def test_heuristic_params_round_trip(params: kfuse.HeuristicParams) -> None:
    again = kfuse.HeuristicParams.from_dict(params.to_dict())
    assert type(again) is type(params)
    assert again == params and hash(again) == hash(params)
    assert repr(again) == repr(params)
    assert again.to_dict() == params.to_dict()


@pytest.mark.parametrize(
    "field, value",
    [("block_x", None), ("block_x", "a"), ("block_x", 2.5), ("persistent", 1), ("lparams", 5)],
)
def test_a_field_of_the_wrong_type_is_a_params_error(field: str, value: object) -> None:
    """A kfuse error naming the field (and still a TypeError), not nanobind's own."""
    p = kfuse.ReductionParams("reduction")
    with pytest.raises(kfuse.ParamsError, match=f"ReductionParams.{field}|HeuristicParams"):
        setattr(p, field, value)
    with pytest.raises(TypeError):
        setattr(p, field, value)
    launch = kfuse.LaunchParams(block_x=32)
    with pytest.raises(kfuse.ParamsError, match="LaunchParams.block_x has the wrong type"):
        launch.block_x = "32"
    launch.block_x = None  # optional fields take None
    assert launch.block_x is None
