"""The fusion generator's scan step: fd.ops.cumsum (half the time), cumprod, cummax or
cummin of a value of its pool, along any axis (negative dims too), in the value's own dtype
or, where the dtypes drawn have them, in Half or BFloat16 (accumulated in float, each prefix
rounded); its result joins the pool, so that the pointwise steps after it make the scan's
epilogue (and, with reductions, later segments). A cumprod's factors are 1 + 1e-3 tanh(x),
as the prod reductions' (kfuse.testing.strategies.reductions), so that products stay in
range."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kfuse.dtypes import DataType
from kfuse.testing.strategies.generator import Entry, Gen, one_in

SCAN_GROWTH = 1100.0
"""How much a prefix sum can grow its terms' bound: the longest axis the inputs draw (as
a sum's, kfuse.testing.strategies.reductions)."""
HALF_LIMIT = 60000.0
"""The largest bound a Half scan is drawn with (Half's largest value is 65504)."""


def scan_step(gen: Gen) -> None:
    o = gen.fd.ops
    e = gen.pick(full=True)
    v: Any = e.val
    if v.ndim == 0:
        return
    dim = gen.draw(st.integers(-v.ndim, v.ndim - 1))
    method = gen.draw(st.sampled_from(["cumsum", "cumsum", "cumprod", "cummax", "cummin"]))
    if v.dtype is DataType.Bool:
        v = o.cast(v, DataType.Int)  # torch's count of the true elements
    if method == "cumprod":
        if not v.dtype.is_floating:
            v = o.cast(v, DataType.Float)
        v = o.add(o.mul(o.tanh(v), 1e-3), 1.0)
    if v.axes[dim].is_broadcast:
        # Along a size-1 axis a scan is the value itself (the builder makes it a copy):
        # expanded first, it is a scan.
        v = o.expand(v, shape=[3 if i == dim % v.ndim else -1 for i in range(v.ndim)])
    bound = {"cumsum": e.bound * SCAN_GROWTH + 3.0, "cumprod": 4.0}.get(method, e.bound)
    narrow = [
        d
        for d in gen.dtypes
        if d is DataType.BFloat16 or (d is DataType.Half and bound < HALF_LIMIT)
    ]
    narrowed = v.dtype.is_floating and bool(narrow) and one_in(gen.draw, 3)
    if narrowed:  # rounded: no longer exact
        v = o.cast(v, gen.draw(st.sampled_from(narrow)))
    out = getattr(o, method)(v, dim)
    # Exact results of exact operands: running maxima and minima, integer sums.
    exact = e.exact and not narrowed and method != "cumprod"
    exact = exact and (method != "cumsum" or not out.dtype.is_floating)
    entry = Entry(out, exact, bound)
    gen.results.append(entry)
    gen.required.append(entry)
    gen.pool.append(entry)
