"""FusionDefinition: the user-facing way to define a fusion, and its `fd.ops` namespace.

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        fd.add_output(fd.ops.relu(x) * 2.0)

Every op checks its operands and raises kfuse.errors.DefinitionError at the line that defines
something invalid. Composite ops (mean, var, softmax, layer_norm, ...) expand to primitives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, overload

from kfuse.dtypes import DataType, as_dtype, from_array_dtype, optional_dtype
from kfuse.errors import DefinitionError
from kfuse.frontend.execute import FusionExecution
from kfuse.frontend.ops import Ops
from kfuse.ir.builder import MAX_EXTENT, Builder, as_index, describe
from kfuse.ir.fusion import Fusion
from kfuse.ir.printer import fusion_to_python
from kfuse.ir.values import Axis, Scalar, TensorView, Val

__all__ = ["FusionDefinition", "DataType"]


class FusionDefinition(FusionExecution):
    """A fusion under construction; use it as a context manager.

    Attributes: `fusion` (the kfuse.ir.Fusion being built), `ops` (the op namespace).
    Leaving the `with` block finalizes the fusion (it must have an output); afterwards no op
    may be added.
    """

    # The device of a fusion without tensor inputs, as Thunder sets it (`fd._selected_device`
    # before the definition, read back for execute's `device=`); None: the default.
    _selected_device: int | None = None

    def __init__(self) -> None:
        self._fusion = Fusion()
        self._fusion.in_definition = True  # until __exit__ finalizes it
        self._builder = Builder(self._fusion, self)
        self.ops = Ops(self)
        self._state = "new"

    @property
    def fusion(self) -> Fusion:
        """The kfuse.ir.Fusion defined (nvFuser's `fd.fusion`): the executor cache's where the
        definition has one (`fd.fec`, perhaps an equal definition's, shared through an
        LRUCache), else its own; nvFuser's programs delete their own once cached
        (`del fd._fusion`)."""
        if self._executor_cache is not None:
            return self._executor_cache.definition  # type: ignore[no-any-return]
        own = self.__dict__.get("_fusion")
        if own is None:
            raise DefinitionError(
                "fd.fusion: the definition's fusion was deleted (del fd._fusion) and it has "
                "no executor cache (fd.fec) to take it from"
            )
        return own  # type: ignore[no-any-return]

    # ---- context ----
    def __enter__(self) -> FusionDefinition:
        if self._state != "new":
            raise DefinitionError("a FusionDefinition can be entered only once")
        self._state = "open"
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            # The definition stopped half way: running what it holds would run something
            # the user did not finish writing.
            self._state = "broken"
            self._broken_by = f"{exc_type.__name__}: {exc}"
            return  # let the user's error through
        self._state = "closed"
        if not self.fusion.outputs:
            raise DefinitionError(
                "the fusion has no outputs: call fd.add_output(t) inside the "
                "`with FusionDefinition() as fd:` block"
            )
        self.fusion.finalize()

    def check_open(self, op: str) -> None:
        """Raise DefinitionError unless ops may be added now."""
        if self._state == "new":
            raise DefinitionError(
                f"{op}: called outside the `with FusionDefinition() as fd:` block (enter it first)"
            )
        if self._state == "closed":
            raise DefinitionError(
                f"{op}: the FusionDefinition is already finished; ops must "
                "be called inside its `with` block"
            )
        if self._state == "broken":
            raise DefinitionError(
                f"{op}: the FusionDefinition's `with` block raised "
                f"({self._broken_by}); define the fusion again"
            )

    # ---- inputs ----
    # For type checkers: a tensor, unless is_cpu says otherwise (then a Scalar, or either).
    @overload
    def define_tensor(
        self,
        shape: Sequence[int] | None = None,
        contiguity: bool | Sequence[bool | None] | None = None,
        dtype: Any = DataType.Float,
        is_cpu: Literal[False] = False,
        stride_order: Sequence[int] | None = None,
        *,
        sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        static_sizes: bool = False,
    ) -> TensorView: ...

    @overload
    def define_tensor(
        self,
        shape: Sequence[int] | None = None,
        contiguity: bool | Sequence[bool | None] | None = None,
        dtype: Any = DataType.Float,
        is_cpu: bool = False,
        stride_order: Sequence[int] | None = None,
        *,
        sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        static_sizes: bool = False,
    ) -> Val: ...

    def define_tensor(
        self,
        shape: Sequence[int] | None = None,
        contiguity: bool | Sequence[bool | None] | None = None,
        dtype: Any = DataType.Float,
        is_cpu: bool = False,
        stride_order: Sequence[int] | None = None,
        *,
        sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        static_sizes: bool = False,
    ) -> Val:
        """A tensor input.

        shape: one entry per axis: -1 symbolic, 1 broadcast, another n >= 0 a fixed size.
        contiguity: None (any strides), a bool for every non-broadcast axis, or a list with one
        entry per axis (None for broadcast axes). stride_order: see TensorView.
        Alternatively give `sizes` and `strides` (in elements) of an example tensor: sizes of 1
        become broadcast axes, the others symbolic (fixed with static_sizes), and contiguity
        and stride order are derived from the strides.
        The positional order is nvFuser's (shape, contiguity, dtype, is_cpu, stride_order).
        is_cpu: nvFuser's CPU scalar tensor, for a 0-dim shape only: a tensor on the host
        whose one value the kernels read as a scalar, so it is a symbolic scalar input of the
        dtype (execute takes the 0-dim tensor, or a number, in its place).
        """
        self.check_open("define_tensor")
        if sizes is not None or strides is not None:
            if shape is not None or sizes is None or strides is None:
                raise DefinitionError("define_tensor: give either shape or both sizes and strides")
            sizes = _index_list(sizes, "sizes")
            shape, contiguity, stride_order = _layout_from_strides(
                sizes, _index_list(strides, "strides")
            )
            if static_sizes:
                shape = list(sizes)
        if shape is None:
            raise DefinitionError("define_tensor: shape is required")
        if not isinstance(shape, (list, tuple)):
            raise DefinitionError(f"define_tensor: shape must be a list, got {describe(shape)}")
        if is_cpu is not False:
            return self._cpu_scalar_tensor(shape, dtype, is_cpu)
        axes = []
        for i, n in enumerate(shape):
            try:
                n = as_index(n, "define_tensor", f"shape entry {i}")
            except DefinitionError:
                n = None
            if n is None or not -1 <= n <= MAX_EXTENT:
                raise DefinitionError(
                    f"define_tensor: shape entry {i} is {shape[i]!r}; use -1 "
                    "(symbolic), 1 (broadcast) or a size from 0 to 2**63 - 1"
                )
            axes.append(Axis(n == 1, None if n == -1 else n))
        dt = as_dtype(dtype, what="define_tensor: dtype")
        tv = self._builder.new_tensor(dt, axes, is_input=True)
        tv.contiguity = _contiguity(contiguity, axes)
        if stride_order is not None:
            order = tuple(_index_list(stride_order, "stride_order"))
            if sorted(order) != list(range(len(axes))):
                raise DefinitionError(
                    f"define_tensor: stride_order {list(order)} is not a "
                    f"permutation of range({len(axes)})"
                )
            if order != tuple(range(len(axes) - 1, -1, -1)):
                tv.stride_order = order
        self.fusion.inputs.append(tv)
        return tv

    def _cpu_scalar_tensor(self, shape: Sequence[int], dtype: Any, is_cpu: Any) -> Scalar:
        if is_cpu is not True:
            raise DefinitionError(f"define_tensor: is_cpu must be True or False, got {is_cpu!r}")
        if len(shape) != 0:
            raise DefinitionError(
                f"define_tensor: is_cpu=True is for 0-dim tensors (a CPU scalar tensor, as in "
                f"nvFuser); shape {list(shape)} has {len(shape)} axes"
            )
        dt = as_dtype(dtype, what="define_tensor: dtype")
        s = self._builder.new_scalar(dt, is_input=True)
        self.fusion.inputs.append(s)
        return s

    def from_pytorch(self, tensor: Any, static_sizes: bool = False) -> Val:
        """nvFuser's spelling of from_array for a torch tensor; static_sizes fixes every
        size (else sizes other than 1 are symbolic). A 0-dim CPU tensor is a CPU scalar
        tensor, as in nvFuser (define_tensor's is_cpu)."""
        self.check_open("from_pytorch")
        device = getattr(tensor, "device", None)
        if getattr(device, "type", None) == "cpu" and len(tensor.shape) == 0:
            return self.define_tensor([], dtype=from_array_dtype(tensor.dtype), is_cpu=True)
        return self.from_array(tensor, static_sizes=static_sizes)

    def from_array(self, a: Any, *, static_sizes: bool = False) -> TensorView:
        """A tensor input shaped like array `a` (NumPy, CuPy or torch, duck-typed)."""
        self.check_open("from_array")
        try:
            shape = [int(s) for s in a.shape]
            dtype = from_array_dtype(a.dtype)
            if callable(getattr(a, "stride", None)):
                strides = [int(s) for s in a.stride()]  # torch: elements
            else:
                strides = [int(s) // dtype.itemsize for s in a.strides]  # NumPy/CuPy: bytes
        except (AttributeError, TypeError) as e:
            raise DefinitionError(f"from_array: {type(a).__name__} is not an array ({e})") from None
        tv = self.define_tensor(
            sizes=shape, strides=strides, dtype=dtype, static_sizes=static_sizes
        )
        assert isinstance(tv, TensorView)
        return tv

    def define_scalar(self, value: Any = None, dtype: Any = None) -> Scalar:
        """A scalar: a symbolic input when value is None (dtype defaults to Double), else a
        constant (dtype defaults from the Python type: bool, int -> Int, float -> Double).
        As in nvFuser, define_scalar(DataType.X) is a symbolic input of dtype X, and
        dtype=DataType.Null means the default."""
        self.check_open("define_scalar")
        if isinstance(value, DataType):
            if dtype is not None:
                raise DefinitionError(
                    f"define_scalar: value {value!r} is a dtype and dtype={dtype!r} is given too"
                )
            value, dtype = None, value
        dt = optional_dtype(dtype, what="define_scalar: dtype")
        if value is None:
            s = self._builder.new_scalar(dt or DataType.Double, is_input=True)
            self.fusion.inputs.append(s)
            return s
        return self._builder.constant(value, dt)

    def define_vector(self, size: int) -> list[Scalar]:
        """`size` symbolic Int scalar inputs, as nvFuser's define_vector: execute takes them
        as one list or tuple of ints in their place (or as separate numbers)."""
        self.check_open("define_vector")
        n = as_index(size, "define_vector", "size")
        if n < 0:
            raise DefinitionError(f"define_vector: size must be >= 0, got {n}")
        self._vector_inputs = True
        return [self.define_scalar(None, DataType.Int) for _ in range(n)]

    # ---- outputs ----
    def add_output(self, t: Any, alias_input: Any = None) -> None:
        """Mark tensor `t` (any tensor of this definition, inputs included) as an output.

        alias_input: a tensor input whose storage receives `t` (nvFuser's in-place update):
        execute writes the result there, in that input's layout, and does not return it
        unless `t` is (or becomes) an ordinary output too, where execute returns that input.
        `t` must have the input's dtype and rank; a `t` that is an input is copied (set)."""
        self.check_open("add_output")
        if not isinstance(t, TensorView):
            raise DefinitionError(
                f"add_output: {describe(t)} is not a tensor; outputs must be tensors"
            )
        self._builder.operand(t, "add_output", 0)
        fusion = self.fusion
        if alias_input is not None:
            self._add_aliased_output(t, alias_input)
            return
        for k, out in enumerate(fusion.outputs):
            if out is t and k in fusion.hidden_outputs:
                # Written into an input already: now returned as well, at that position.
                fusion.hidden_outputs = tuple(h for h in fusion.hidden_outputs if h != k)
                return
        fusion.outputs.append(t)

    def _add_aliased_output(self, t: TensorView, inp: Any) -> None:
        fusion = self.fusion
        if not isinstance(inp, TensorView) or not any(v is inp for v in fusion.inputs):
            raise DefinitionError(
                f"add_output: alias_input must be a tensor input of this fusion, "
                f"got {describe(inp)}"
            )
        if t.dtype is not inp.dtype or len(t.axes) != len(inp.axes):
            raise DefinitionError(
                f"add_output: {t.name} ({t.dtype.label}, {len(t.axes)} axes) cannot be "
                f"written into input {inp.name} ({inp.dtype.label}, {len(inp.axes)} axes): "
                "dtype and rank must match"
            )
        for k, (a, b) in enumerate(zip(t.axes, inp.axes, strict=True)):
            if a.extent is not None and b.extent is not None and a.extent != b.extent:
                raise DefinitionError(
                    f"add_output: axis {k} of {t.name} has {a.extent} elements, of input "
                    f"{inp.name} {b.extent}: an output written into an input has its shape"
                )
        position_in = next(k for k, v in enumerate(fusion.inputs) if v is inp)
        if any(i == position_in for _, i in fusion.output_aliases):
            raise DefinitionError(
                f"add_output: input {inp.name} already receives another output; "
                "an input can receive one"
            )
        if t.is_input:
            t = self.ops.set(t)  # the kernel writes a copy, as nvFuser's aliasOutputToInput
        position = next((k for k, v in enumerate(fusion.outputs) if v is t), None)
        if position is None:
            position = len(fusion.outputs)
            fusion.outputs.append(t)
            fusion.hidden_outputs = (*fusion.hidden_outputs, position)
        elif any(o == position for o, _ in fusion.output_aliases):
            raise DefinitionError(f"add_output: {t.name} is written into an input already")
        fusion.output_aliases = (*fusion.output_aliases, (position, position_in))

    @property
    def inputs(self) -> list[Val]:
        """The fusion's inputs in definition order."""
        return list(self.fusion.inputs)

    @property
    def outputs(self) -> list[TensorView]:
        """The fusion's outputs."""
        return list(self.fusion.outputs)

    def __repr__(self) -> str:
        return fusion_to_python(self.fusion)


def _contiguity(contiguity: Any, axes: list[Axis]) -> tuple[bool | None, ...] | None:
    if contiguity is None:
        return None
    if isinstance(contiguity, bool):
        return tuple(None if a.is_broadcast else contiguity for a in axes)
    if not isinstance(contiguity, (list, tuple)):
        raise DefinitionError(
            f"define_tensor: contiguity must be None, a bool or a list, got {describe(contiguity)}"
        )
    entries = list(contiguity)
    if len(entries) != len(axes):
        raise DefinitionError(
            f"define_tensor: contiguity has {len(entries)} entries but shape has {len(axes)}"
        )
    out = []
    for i, (c, a) in enumerate(zip(entries, axes, strict=False)):
        if c is not None and not isinstance(c, bool):
            raise DefinitionError(
                f"define_tensor: contiguity entry {i} is {c!r}, expected True, False or None"
            )
        out.append(None if a.is_broadcast else (False if c is None else c))
    return tuple(out)


def _index_list(values: Any, what: str) -> list[int]:
    """A list argument of integers (define_tensor's sizes, strides, stride_order)."""
    if not isinstance(values, (list, tuple)):
        raise DefinitionError(
            f"define_tensor: {what} must be a list of integers, got {describe(values)}"
        )
    return [as_index(v, "define_tensor", f"{what} entry {k}") for k, v in enumerate(values)]


def _layout_from_strides(
    sizes: list[int], strides: list[int]
) -> tuple[list[int], list[bool | None], list[int] | None]:
    if len(sizes) != len(strides):
        raise DefinitionError(f"define_tensor: {len(sizes)} sizes but {len(strides)} strides")
    for k, n in enumerate(sizes):
        if not 0 <= n <= MAX_EXTENT:
            raise DefinitionError(
                f"define_tensor: sizes entry {k} is {n}; sizes are from 0 to 2**63 - 1"
            )
    n = len(sizes)
    shape = [1 if s == 1 else -1 for s in sizes]
    # Sort axes from the largest stride to the smallest; ties keep the row-major order.
    order = sorted(range(n), key=lambda i: (-strides[i], i))
    stride_order = [0] * n
    for rank, axis in enumerate(order):
        stride_order[axis] = n - 1 - rank
    contiguity: list[bool | None] = [None] * n
    expected = 1
    for axis in reversed(order):
        if sizes[axis] == 1:
            continue
        contiguity[axis] = strides[axis] == expected
        expected = strides[axis] * sizes[axis]
    row_major = stride_order == list(range(n - 1, -1, -1))
    return shape, contiguity, None if row_major else stride_order
