"""Every dtype= argument takes NumPy's dtype spellings as it takes strings and torch's, and
a user sees Int's width (int64) where kfuse shows it."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from kfuse.dtypes import DataType, as_dtype
from kfuse.errors import DefinitionError, InputError
from kfuse.frontend import FusionDefinition

NUMPY_SPELLINGS = [
    (np.float32, DataType.Float),
    (np.dtype("float16"), DataType.Half),
    (np.int64, DataType.Int),
    (np.int32, DataType.Int32),
    (np.bool_, DataType.Bool),
    (np.float64, DataType.Double),
    (np.dtype(np.int64), DataType.Int),
    (ml_dtypes.bfloat16, DataType.BFloat16),
]


@pytest.mark.parametrize(("spelling", "dtype"), NUMPY_SPELLINGS)
def test_numpy_dtypes_are_taken_as_strings_and_torch_dtypes_are(
    spelling: object, dtype: DataType
) -> None:
    assert as_dtype(spelling) is dtype
    assert as_dtype(str(np.dtype(spelling))) is dtype  # "float32": the string NumPy prints
    assert as_dtype(getattr(torch, str(np.dtype(spelling)))) is dtype


def test_define_tensor_cast_and_define_scalar_take_numpy_dtypes() -> None:
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], dtype=np.float16)
        s = fd.define_scalar(dtype=np.int64)
        c = fd.define_scalar(2, dtype=np.int32)
        y = fd.ops.cast(x, dtype=np.float32)
        total = fd.ops.sum(fd.ops.mul(y, s), [0], dtype=np.float64)
        fd.add_output(fd.ops.add(total, c))
        fd.add_output(fd.ops.full([2], 1, dtype=np.bool_))
    assert x.dtype is DataType.Half
    assert (s.dtype, c.dtype, y.dtype) == (DataType.Int, DataType.Int32, DataType.Float)
    assert [o.dtype for o in fd.outputs] == [DataType.Double, DataType.Bool]
    total_out, ones = fd.execute([np.arange(3, dtype=np.float16), 2])
    assert total_out.dtype == np.float64 and float(total_out) == (0 + 1 + 2) * 2 + 2
    assert ones.dtype == np.bool_ and ones.tolist() == [True, True]


def test_a_numpy_dtype_kfuse_does_not_compute_is_a_definition_error() -> None:
    with FusionDefinition() as fd:
        with pytest.raises(DefinitionError, match=r"dtype: .*uint8.* is not a kfuse"):
            fd.define_tensor([-1], dtype=np.uint8)
        with pytest.raises(DefinitionError, match="unsigned integers are not supported"):
            fd.define_tensor([-1], dtype=np.uint64)
        fd.add_output(fd.define_tensor([-1]))


def test_int_is_shown_with_its_width() -> None:
    assert str(DataType.Int) == "DataType.Int (int64)"
    assert f"{DataType.Int}" == "DataType.Int (int64)"
    assert str(DataType.Int32) == "DataType.Int32"
    # The nvFuser-compatible names are unchanged: printed fusions are Python that runs.
    assert repr(DataType.Int) == "DataType.Int" and DataType.Int.value == "Int"
    assert DataType["Int"] is DataType.Int and as_dtype("Int") is DataType.Int


def test_messages_show_int_with_its_width() -> None:
    with FusionDefinition() as fd:
        i = fd.define_tensor([-1], dtype=DataType.Int)
        with pytest.raises(DefinitionError, match=r"\(rank 1 Int \(int64\) tensor\)"):
            fd.ops.softmax(i)
        with pytest.raises(DefinitionError, match=r"expected one of .*Int32, Int \(int64\),"):
            fd.define_tensor([-1], dtype="int8")
        fd.add_output(fd.ops.neg(i))
    with pytest.raises(InputError, match=r"defined as Int \(int64\) but the array is Int32"):
        fd.execute([np.arange(3, dtype=np.int32)])


def test_printed_fusions_keep_nvfusers_dtype_names() -> None:
    with FusionDefinition() as fd:
        i = fd.define_tensor([-1], dtype=np.int64)
        fd.add_output(fd.ops.cast(i, dtype=np.float32))
    assert "DataType.Int" in repr(fd) and "int64" not in repr(fd)
