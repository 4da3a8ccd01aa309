"""A kernel's output operand that would write outside its output stops the call before any
kernel runs (kfuse.engine.operand_spans): the check behind the fold of cats whose windows a
GPU campaign found written through another window's strides."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kfuse.dtypes import DataType
from kfuse.engine.operand_spans import check_operand_spans, element_span
from kfuse.engine.program import KernelProgram
from kfuse.errors import KfuseError
from kfuse.frontend import FusionDefinition
from kfuse.runtime.info import build_runtime_info
from kfuse.runtime.launch import OutputOperand
from reference_checks import rand


def test_element_spans() -> None:
    assert element_span((4, 5), (5, 1)) == (0, 19)
    assert element_span((4, 5), (8, 1)) == (0, 28)
    assert element_span((3, 2), (-2, 1)) == (-4, 1)
    assert element_span((3, 0), (1, 1)) is None
    assert element_span((7,), (0,)) == (0, 0)  # a broadcast: one element


def cat_program() -> tuple[FusionDefinition, list[np.ndarray], KernelProgram]:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        fd.add_output(fd.ops.cat([fd.ops.exp(x), fd.ops.neg(x)], dim=1))
    inputs = [rand((6, 16))]
    fd.execute(inputs)
    program = fd.last_program()
    assert isinstance(program, KernelProgram)
    return fd, inputs, program


def test_the_windows_of_a_folded_cat_pass() -> None:
    fd, inputs, program = cat_program()
    parts = [op for ka in program.launches for op in ka.operands if isinstance(op, OutputOperand)]
    assert {op.byte_offset for op in parts} == {0, 16 * 4}  # two windows of one output
    check_operand_spans(program, build_runtime_info(fd.fusion, inputs))


@pytest.mark.parametrize("how", ["stride", "offset"])
def test_a_window_past_its_output_is_a_kfuse_error(how: str) -> None:
    """The second window's rows at the first row's stride of a wider array (the campaign's
    error), or moved one element on: both reach past the output's last byte."""
    fd, inputs, program = cat_program()
    launch = program.launches[0]
    last = max(
        (k for k, op in enumerate(launch.operands) if isinstance(op, OutputOperand)),
        key=lambda k: launch.operands[k].byte_offset,  # type: ignore[union-attr]
    )
    op = launch.operands[last]
    assert isinstance(op, OutputOperand)
    if how == "stride":
        wrong = dataclasses.replace(op, strides=(op.strides[0] * 2, *op.strides[1:]))
    else:
        wrong = dataclasses.replace(op, byte_offset=op.byte_offset + 4)
    operands = list(launch.operands)
    operands[last] = wrong
    bad = dataclasses.replace(program, launches=[dataclasses.replace(launch, operands=operands)])
    info = build_runtime_info(fd.fusion, inputs)
    with pytest.raises(KfuseError, match=r"internal error .* would write output 0 \(T"):
        check_operand_spans(bad, info)


def test_a_merged_program_reading_an_output_through_a_pad_window_runs() -> None:
    """An emulator campaign's fusion (seed 4244, 2d8e210): m = minimum(a, b) is an output and
    pad(m) another, made by a later segment of one merged program, which reads m from its
    output array through the pad's window (two elements of a one-element output: the
    kernel loads only inside). The check runs on each segment's program as it is built, where
    an output operand is one a kernel writes, not on the merged one, where it may be read."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1, -1, -1], dtype=DataType.Float)
        b = fd.define_tensor(shape=[1, 1, 1, 1], dtype=DataType.Int32)
        total = fd.ops.sum(fd.ops.cast(fd.ops.expand(b, shape=[3, -1, -1, -1]), DataType.Int), [0])
        m = fd.ops.minimum(b, fd.ops.cast(fd.ops.isposinf(a), dtype=DataType.Int32))
        fd.add_output(m)
        fd.add_output(fd.ops.pad(m, [1, 0, 0, 0, 0, 0, 0, 0], 0))
        fd.add_output(fd.ops.broadcast(total, [True, False, False, False]))
    a = np.full((1, 1, 1, 1), np.inf, np.float32)
    b = np.full((1, 1, 1, 1), 5, np.int32)
    m, padded, total = fd.execute([a, b])
    np.testing.assert_array_equal(m, [[[[1]]]])
    np.testing.assert_array_equal(padded, [[[[0, 1]]]])
    np.testing.assert_array_equal(total, [[[[15]]]])
    assert type(fd.last_program()).__name__ == "SegmentKernelsProgram"
