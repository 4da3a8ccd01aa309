"""assert_close and the tolerances kfuse's tests use to compare kernels with the reference."""

from __future__ import annotations

import math
from typing import Any

from kfuse.dtypes import REAL_OF, DataType
from kfuse.ir.exprs import LinearOp, MatmulOp, ReductionOp, ScanOp, WelfordOp
from kfuse.ir.layout_ops import allocation_order, ordered_strides
from kfuse.ir.values import TensorView, Val
from kfuse.reference.rounding import SUM_ROUNDING
from kfuse.runtime.arrays import layout_of

# (rtol, atol) for one op's worth of rounding, per dtype.
TOLERANCES: dict[DataType, tuple[float, float]] = {
    DataType.Double: (1e-10, 1e-12),
    DataType.Float: (1.3e-5, 1e-5),
    DataType.Half: (2e-3, 1e-4),
    DataType.BFloat16: (1.6e-2, 1e-3),
    # float8: one ulp relative (2^-3 and 2^-2, twice the worst rounding error), and the
    # smallest subnormal (2^-9, 2^-16) absolute, the spacing values near zero round to.
    DataType.Float8_e4m3fn: (1.25e-1, 2e-3),
    DataType.Float8_e5m2: (2.5e-1, 1.6e-5),
}


ALTERNATIVE_MULTIPLIER = 3.0
"""How many times the same-precision reference's error a kernel's error may be (see
assert_close's `alternative`)."""


def tolerance(dtype: DataType, reduction_size: int = 1) -> tuple[float, float]:
    """(rtol, atol) for `dtype` after reducing `reduction_size` elements; see assert_close."""
    if not dtype.is_floating:
        return 0.0, 0.0
    rtol, atol = TOLERANCES[dtype]
    grow = math.sqrt(max(1, reduction_size))
    return rtol * grow, atol * grow


def to_numpy(a: Any) -> Any:
    """A NumPy copy of a NumPy/CuPy/torch array (torch's bf16/half/float8 as float64), or of
    a number."""
    import numpy as np

    if hasattr(a, "detach"):  # torch
        t = a.detach().cpu()
        if t.is_floating_point():
            t = t.double()
        return t.numpy()
    if hasattr(a, "get") and type(a).__module__.startswith("cupy"):
        return a.get()
    return np.asarray(a)


def assert_close(
    actual: Any,
    expected: Any,
    dtype: DataType,
    reduction_size: int = 1,
    *,
    alternative: Any = None,
    magnitude: Any = None,
    indeterminate: Any = None,
    order_decides: Any = None,
) -> None:
    """Assert that `actual` matches `expected` within `dtype`'s tolerance.

    Integer and Bool dtypes must match exactly. Floating dtypes pass where
    |actual - expected| <= atol + rtol * |expected| with (rtol, atol) from TOLERANCES, both
    grown by sqrt(reduction_size) (rounding errors of a sum grow like a random walk):
    Double (1e-10, 1e-12), Float (1.3e-5, 1e-5), Half (2e-3, 1e-4), BFloat16 (1.6e-2, 1e-3),
    Float8_e4m3fn (1.25e-1, 2e-3), Float8_e5m2 (2.5e-1, 1.6e-5).
    NaN must appear at the same positions on both sides, and infinities must match exactly
    (same positions, same sign). Bool arrays must hold bytes 0 and 1 only. Shapes must be
    equal. Raises AssertionError describing the worst mismatch and the number of mismatches.

    alternative: the same reference computed in the kernel's precision
    (kfuse.reference.evaluate(..., accumulate="same")), for what float64 cannot judge alone:
    * an ill-conditioned result (a normalization of nearly equal values amplifies float32's
      rounding a hundredfold): a finite element also passes when its error is at most
      ALTERNATIVE_MULTIPLIER times the alternative's own error (as torch's own
      fp64-reference comparisons do);
    * whether a value overflows to inf, underflows to zero or cancels to exactly zero (and so
      whether inf * it is NaN) depends on the precision: where `expected`, `alternative` or
      `actual` is NaN or infinite, and for integer and Bool elements where the references
      disagree, an element also passes when it matches `alternative` by the rules above.

    magnitude: for an output that sums (kfuse.reference.sum_magnitudes), the float64 sum of
    its terms' absolute values per element. A float32 sum's rounding error scales with its
    terms, not with the result: 1490.48 + 0 + 201.71 - 201.71 - 1490.48 is exactly 0 but
    float32 may leave 3e-5. Each element's atol grows by SUM_ROUNDING times the compute
    precision's epsilon (float64's for Double, else float32's) times sqrt(reduction_size)
    times its magnitude (where that is finite).

    indeterminate: a Bool array of the elements that are an infinity or NaN whose sign or
    kind rounding decides (kfuse.reference.conditioning: a row's x - mean that cancels to a
    residue of either sign, or to exactly 0, times an infinite weight). There any infinity
    or NaN passes where the reference is one too; a finite value still fails.

    order_decides: a Bool array of the elements whose value the order of a product's
    multiplications decides (kfuse.reference.conditioning: its partial products can leave
    the kernel's range, so some order overflows or underflows on the way), or that of a sum
    whose rounding moves a function's operand across a pole (lgamma of an x - mean that is 0):
    any value passes there.
    """
    import numpy as np

    a = to_numpy(actual)
    e = to_numpy(expected)
    if a.shape != e.shape:
        raise AssertionError(f"shape mismatch: actual {a.shape}, expected {e.shape}")
    if np.iscomplexobj(a) or np.iscomplexobj(e):  # each part as a value of the parts' dtype
        for part in (np.real, np.imag):
            assert_close(
                part(a),
                part(e),
                REAL_OF.get(dtype, dtype),
                reduction_size,
                alternative=None if alternative is None else part(to_numpy(alternative)),
                magnitude=magnitude,
                indeterminate=indeterminate,
                order_decides=order_decides,
            )
        return
    if a.dtype == np.bool_:
        _assert_bool_bytes(a)
    alt = None if alternative is None else to_numpy(alternative)
    unordered = None if order_decides is None else to_numpy(order_decides).astype(bool)
    if not dtype.is_floating:
        _assert_integers_equal(a, e, dtype, alt, unordered)
        return
    _assert_floats_close(a, e, dtype, reduction_size, alt, magnitude, indeterminate, unordered)


def _assert_bool_bytes(a: Any) -> None:
    """AssertionError where a Bool array holds a byte other than 0 or 1."""
    import numpy as np

    # A bool byte other than 0 or 1 reads as True: only the raw bytes show an element
    # that no kernel wrote (kfuse.runtime.arrays.POISON_BYTE).
    raw = np.ascontiguousarray(a).view(np.uint8).reshape(a.shape)  # 0-d stays 0-d
    if (raw > 1).any():
        first = _index_of_max(raw > 1)
        raise AssertionError(
            f"{int((raw > 1).sum())} of {a.size} Bool elements hold a byte "
            f"other than 0 or 1 (never written?); first at {first}: "
            f"{int(raw[first])}"
        )


def _assert_integers_equal(a: Any, e: Any, dtype: DataType, alt: Any, unordered: Any) -> None:
    """assert_close for integer and Bool dtypes: equal, except where the order decides or
    where the references disagree and `a` matches the kernel's precision's (`alt`)."""
    import numpy as np

    bad = a.astype(np.int64) != e.astype(np.int64)
    if unordered is not None:
        bad &= ~unordered
    if alt is not None:
        alt = alt.astype(np.int64)
        bad &= ~((alt != e.astype(np.int64)) & (a.astype(np.int64) == alt))
    if bad.any():
        at = _index_of_max(bad)
        raise AssertionError(
            f"{int(bad.sum())} of {a.size} {dtype.value} elements differ; "
            f"first at {at}: actual {a[at]}, expected {e[at]}"
        )


def _assert_floats_close(
    a: Any,
    e: Any,
    dtype: DataType,
    reduction_size: int,
    alt: Any,
    magnitude: Any,
    indeterminate: Any,
    unordered: Any,
) -> None:
    """assert_close for floating dtypes: within the tolerance (grown by `magnitude`), except
    where the order or the rounding decides, or `alt` (the kernel's precision's reference)
    excuses the error; AssertionError naming the worst element otherwise."""
    import numpy as np

    a = a.astype(np.float64)
    e = e.astype(np.float64)
    rtol, atol = tolerance(dtype, reduction_size)
    allowed = _allowed_error(atol, dtype, reduction_size, magnitude)
    bad, err = _not_close(a, e, rtol, allowed)
    if unordered is not None:
        bad &= ~unordered
    if indeterminate is not None and bad.any():
        rounding_decides = to_numpy(indeterminate).astype(bool)
        bad &= ~(rounding_decides & ~np.isfinite(a) & ~np.isfinite(e))
    if alt is not None and bad.any():
        alt = alt.astype(np.float64)
        special = ~np.isfinite(a) | ~np.isfinite(e) | ~np.isfinite(alt)
        bad &= ~(special & ~_not_close(a, alt, rtol, allowed)[0])
        # (values near float64's largest make the product inf: within, as it should be)
        with np.errstate(invalid="ignore", over="ignore"):
            within = ~special & (err <= ALTERNATIVE_MULTIPLIER * np.abs(alt - e))
        bad &= ~within
    if bad.any():
        score = np.where(bad, np.nan_to_num(err, nan=np.inf, posinf=np.inf), -1.0)
        idx = _index_of_max(score)
        raise AssertionError(
            f"{int(bad.sum())} of {a.size} {dtype.value} elements are not close "
            f"(rtol={rtol:.3g}, atol={atol:.3g}); worst at {idx}: "
            f"actual {float(a[idx])!r}, expected {float(e[idx])!r}"
            + ("" if alt is None else f" (in the kernel's precision {float(alt[idx])!r})")
            + (
                ""
                if magnitude is None
                else f" (allowed there {np.broadcast_to(allowed, a.shape)[idx]:.3g})"
            )
        )


def _allowed_error(atol: float, dtype: DataType, reduction_size: int, magnitude: Any) -> Any:
    """The absolute error each element may have: atol, grown by its sum's magnitude where
    there is one (SUM_ROUNDING; see assert_close's `magnitude`)."""
    import numpy as np

    allowed: Any = atol
    if magnitude is not None:
        eps = float(np.finfo(np.float64 if dtype is DataType.Double else np.float32).eps)
        m = to_numpy(magnitude).astype(np.float64)
        grow = SUM_ROUNDING * eps * math.sqrt(max(1, reduction_size))
        allowed = atol + grow * np.where(np.isfinite(m), m, 0.0)
    return allowed


def _index_of_max(values: Any) -> tuple[int, ...]:
    """The index of the first largest element of `values` (of a Bool mask: its first True),
    () for a 0-d array, which np.nonzero refuses (a mismatch in a 0-d output was reported
    as numpy's ValueError)."""
    import numpy as np

    return tuple(int(i) for i in np.unravel_index(int(np.argmax(values)), values.shape))


def _not_close(a: Any, e: Any, rtol: float, atol: float) -> tuple[Any, Any]:
    """(where float64 arrays `a` and `e` differ by assert_close's rules, |a - e|)."""
    import numpy as np

    nan_a, nan_e = np.isnan(a), np.isnan(e)
    inf_mismatch = (np.isinf(a) | np.isinf(e)) & (a != e) & ~nan_a & ~nan_e
    with np.errstate(invalid="ignore"):
        err = np.abs(a - e)
        bad = (
            (nan_a != nan_e)
            | inf_mismatch
            | (~nan_a & ~nan_e & ~np.isinf(e) & ~(err <= atol + rtol * np.abs(e)))
        )
    return bad, err


def output_tolerance_dtype(fusion: Any, output: TensorView) -> DataType:
    """The least precise floating dtype computed on the way to `output` (its own dtype when it
    is not floating; a complex output's is that of its parts): errors made there bound the
    output's accuracy."""
    if not (output.dtype.is_floating or output.dtype.is_complex):
        return output.dtype
    order = [
        DataType.Float8_e5m2,
        DataType.Float8_e4m3fn,
        DataType.BFloat16,
        DataType.Half,
        DataType.Float,
        DataType.Double,
    ]
    worst = REAL_OF.get(output.dtype, output.dtype)
    for expr in _cone(fusion, output):
        for o in expr.outputs:
            if (
                isinstance(o, TensorView)
                and o.dtype.is_floating
                and order.index(o.dtype) < order.index(worst)
            ):
                worst = o.dtype
    return worst


def output_reduction_size(fusion: Any, output: TensorView, shapes: dict) -> int:
    """The product of the reduced extents of every reduction, matmul/linear contraction and
    scanned axis on the way to `output` (1 when there is none), for assert_close's
    reduction_size. `shapes` is Fusion.infer_shapes'."""
    total = 1
    for expr in _cone(fusion, output):
        if isinstance(expr, (ReductionOp, WelfordOp)):
            shape = shapes[expr.inputs[0]]
            total *= max(1, math.prod(shape[d] for d in expr.dims))
        elif isinstance(expr, ScanOp):  # the longest prefix sum adds the whole axis
            total *= max(1, shapes[expr.inputs[0]][expr.dim])
        elif isinstance(expr, (MatmulOp, LinearOp)):
            total *= max(1, shapes[expr.inputs[0]][-1])  # products summed per element
    return total


def assert_outputs_close(
    fusion: Any,
    actual: list[Any],
    expected: list[Any],
    inputs: list[Any],
    *,
    alternative: list[Any] | None = None,
    magnitudes: list[Any] | None = None,
    indeterminate: list[Any] | None = None,
    order_decides: list[Any] | None = None,
    layouts: bool = True,
) -> None:
    """assert_close on every output, with the dtype and reduction size the fusion implies
    (and the output of `alternative`, the reference in the kernel's precision, and of
    `magnitudes`, `indeterminate` and `order_decides`, kfuse.reference.conditioning's, if
    given). `layouts`: also each stride_order output's strides (kfuse's outputs; a
    reference computes values, row major)."""
    fusion = getattr(fusion, "fusion", fusion)
    if len(actual) != len(expected):
        raise AssertionError(f"{len(actual)} outputs, expected {len(expected)}")
    shapes = fusion.infer_shapes(inputs)
    for i, (out, a, e) in enumerate(zip(fusion.outputs, actual, expected, strict=False)):
        try:
            if layouts:
                _assert_stored_as_asked(out, a)
            assert_close(
                a,
                e,
                output_tolerance_dtype(fusion, out),
                output_reduction_size(fusion, out, shapes),
                alternative=None if alternative is None else alternative[i],
                magnitude=None if magnitudes is None else magnitudes[i],
                indeterminate=None if indeterminate is None else indeterminate[i],
                order_decides=None if order_decides is None else order_decides[i],
            )
        except AssertionError as err:
            raise AssertionError(f"output {i} ({out.name}): {err}") from None


def _assert_stored_as_asked(out: TensorView, array: Any) -> None:
    """An output of fd.ops.stride_order has the strides of a dense array in its order (on
    its axes longer than 1, of a non-empty array: a size-1 axis's stride places nothing,
    and frameworks differ)."""
    order = allocation_order(out)
    if order is None:
        return
    layout = layout_of(array, "output")
    expected = ordered_strides(layout.shape, order)
    placing = [k for k, n in enumerate(layout.shape) if n > 1]
    empty = math.prod(layout.shape) == 0  # no element: any strides hold it
    if not empty and [layout.strides[k] for k in placing] != [expected[k] for k in placing]:
        raise AssertionError(
            f"stored with strides {tuple(layout.strides)}, expected {expected} "
            f"(stride_order {list(order)})"
        )


def _cone(fusion: Any, output: TensorView) -> list:
    fusion = getattr(fusion, "fusion", fusion)
    seen: set[int] = set()
    stack: list[Val] = [output]
    exprs = []
    while stack:
        v = stack.pop()
        if id(v) in seen or v.definition is None:
            continue
        seen.add(id(v))
        exprs.append(v.definition)
        stack.extend(v.definition.inputs)
    return exprs
