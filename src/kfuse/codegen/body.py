"""The per-element body of a kernel: straight-line C++ computing outputs from loaded operands.

Every kernel kind (pointwise, reduction prologue/epilogue, persistent) computes its elements
with the same body emitter, so an op behaves identically whatever scheduler runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from kfuse.codegen import contraction
from kfuse.codegen.domain import PartOf, Use, View
from kfuse.codegen.expressions import compute_ctype, expression, scalar_operand
from kfuse.dtypes import REDUCED_FLOATS, DataType
from kfuse.ir.exprs import BinaryOp, CastOp, CatOp, TernaryOp, UnaryOp
from kfuse.ir.values import Scalar, TensorView, Val


def from_storage(expr: str, dtype: DataType) -> str:
    """A storage-typed value (as loaded from memory) in its compute type."""
    return f"kf::to_float({expr})" if dtype in REDUCED_FLOATS else expr


def to_storage(expr: str, dtype: DataType, exact: bool = False) -> str:
    """A compute-typed value converted to `dtype`'s storage type (exact for rounded values).

    exact: the value is known to be representable in bfloat16 (Body.exact), so narrowing is
    taking its top half; that saves a conversion instruction per element, and conversions run
    at a quarter of the arithmetic rate, where a bf16 kernel's compute budget is tightest."""
    if dtype is DataType.BFloat16 and exact:
        return f"kf::bfloat16_from_exact({expr})"
    return f"kf::cast<{dtype.cuda_type}>({expr})" if dtype in REDUCED_FLOATS else expr


def round_to_dtype(expr: str, dtype: DataType) -> str:
    """Round a compute-typed result to `dtype`'s precision, keeping the compute type."""
    if dtype in REDUCED_FLOATS:
        return f"kf::to_float(kf::cast<{dtype.cuda_type}>({expr}))"
    return expr


@dataclass
class Body:
    """Lines of C++ plus the variable holding each Use's compute-typed value."""

    lines: list[str]
    names: dict[Use, str]
    # Names of BFloat16 values computed here: rounded by round_to_dtype, so exact in bf16.
    exact: set[str]

    def store(self, use: Use) -> str:
        """The storage-typed expression of `use`'s value, for an output store."""
        name = self.names[use]
        return to_storage(name, use.val.dtype, exact=name in self.exact)


def emit_body(
    uses: list[Use],
    leaves: dict[Use, str],
    scalar_params: dict[Scalar, str],
    prefix: str = "v",
    fast: frozenset[Val] = frozenset(),
    selectors: dict[Use, str] | None = None,
    fused: frozenset[Val] = frozenset(),
) -> Body:
    """Emit `const T name = ...;` for every non-leaf use, in order.

    leaves: compute-typed C++ expressions for the uses that are read, not computed (loaded
    inputs, reduction results). scalar_params: kernel parameter names of non-constant Scalars.
    fast: vals whose ops may take their approximate forms (kfuse.codegen.precision).
    selectors: per cat the kernel computes (DomainMap.cats), the C++ int naming the part
    its element is in: each part's values are computed in a branch of their own, so that no
    op ever sees the values that stand in outside a part's window (an integer division by
    them could trap). fused: the products computed inside the fma of the sum that reads them
    (kfuse.codegen.contraction.products of the fusion).
    """
    names: dict[Use, str] = dict(leaves)
    lines: list[str] = []
    exact: set[str] = set()
    order = {use: k for k, use in enumerate(uses)}

    def emit(use: Use, into: list[str]) -> None:
        k = order[use]
        name = f"{prefix}{k}"
        val = use.val
        expr = val.definition
        assert expr is not None, f"{val.name} is neither computed nor a leaf"
        if val in fused:
            return  # computed inside its sum's fma
        if isinstance(expr, CatOp):
            into.append(f"{compute_ctype(val.dtype)} {name};")
            _emit_parts(use, name, (selectors or {})[use], [u for u in uses if u.part], into)
            return
        if isinstance(expr, (UnaryOp, BinaryOp, TernaryOp, CastOp)):
            value = _computed(expr, use, val in fast, fused, names, scalar_params)
            value = round_to_dtype(value, val.dtype)
            if val.dtype is DataType.BFloat16:
                exact.add(name)
        else:
            # Broadcast, expand, squeeze, permute: the value is the input's at the mapped view.
            from kfuse.codegen.domain import operand_views

            in_use = Use(expr.inputs[0], cast(View, operand_views(expr, use.view)[0]), use.part)
            value = names[in_use]
        into.append(f"const {compute_ctype(val.dtype)} {name} = {value};")
        names[use] = name

    def _emit_parts(cat: Use, name: str, selector: str, in_parts: list[Use], into: list) -> None:
        """`name` = the value of the part `selector` names, each part's uses in its branch."""
        expr = cast(CatOp, cat.val.definition)
        results = []
        for index, part in enumerate(expr.inputs):
            head = "if" if index == 0 else "} else if"
            last = index == len(expr.inputs) - 1
            into.append("} else {" if last else f"{head} ({selector} == {index}) {{")
            branch: list[str] = []
            of = PartOf(expr, index, cat.view)
            for use in in_parts:
                if use.part == of and use not in names:
                    emit(use, branch)
            result = names[Use(part, cat.view, of)]
            branch.append(f"{name} = {result};")
            into.extend(f"  {line}" for line in branch)
            results.append(result)
        into.append("}")
        names[cat] = name
        if all(r in exact for r in results):
            exact.add(name)

    for use in uses:
        if use in names or use.part is not None:  # a part's uses: in its cat's branch
            continue
        emit(use, lines)
    return Body(lines, names, exact)


def _computed(
    expr: UnaryOp | BinaryOp | TernaryOp | CastOp,
    use: Use,
    fast: bool,
    fused: frozenset[Val],
    names: dict[Use, str],
    scalar_params: dict[Scalar, str],
) -> str:
    """The C++ expression of `expr`'s value at `use`, in its compute type: the op's template
    of its operands, or for a sum of one of the `fused` products an fma of the product's
    factors. A product the function reads as a leaf (a value it is given, already rounded)
    is not computed here, and is added as it is."""
    at = contraction.sum_operand(expr, fused)
    product_use = None if at is None else _operand_use(cast(TensorView, expr.inputs[at]), use)
    if at is None or product_use is None or product_use in names:
        operands = [
            _operand(inp, use, expr, i, names, scalar_params) for i, inp in enumerate(expr.inputs)
        ]
        return expression(expr, operands, fast)
    sum_expr = cast(BinaryOp, expr)
    mul = cast(BinaryOp, product_use.val.definition)
    factors = [
        _operand(f, product_use, mul, i, names, scalar_params) for i, f in enumerate(mul.inputs)
    ]
    other = _operand(sum_expr.inputs[1 - at], use, expr, 1 - at, names, scalar_params)
    return contraction.fma(sum_expr, at, factors, other)


def _operand_use(inp: TensorView, use: Use) -> Use:
    """The use of operand `inp` that `use` (of the expr reading it) reads."""
    view = tuple(None if ax.is_broadcast else r for ax, r in zip(inp.axes, use.view))
    return Use(inp, view, use.part)


def _operand(
    inp: Val,
    use: Use,
    expr: object,
    index: int,
    names: dict[Use, str],
    scalar_params: dict[Scalar, str],
) -> str:
    if isinstance(inp, Scalar):
        return scalar_operand(inp, scalar_params.get(inp))
    assert isinstance(inp, TensorView)
    return names[_operand_use(inp, use)]
