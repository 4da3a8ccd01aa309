"""fd.ops methods of the library ops nvFuser hands to ATen (topk, argsort, scatter,
sdpfa_fwd, sdpfa_bwd, grouped_mm), with nvFuser's python_direct signatures. Each runs as a
library call of the inputs' framework in an expr_eval segment of its own (see
kfuse.schedule.library_calls); Ops inherits them."""

from __future__ import annotations

from typing import Any

from kfuse.frontend.operands import Extent, Operand, ScalarOperand
from kfuse.ir.values import Scalar, TensorView, Val


class LibraryMethods:
    """Mixed into kfuse.frontend.ops.Ops (which provides _fd and _b)."""

    _fd: Any
    _b: Any

    def topk(
        self, arg: Val, k: Extent, dim: int = -1, largest: bool = True, sorted: bool = False
    ) -> list[TensorView]:
        """[values, indices]: the k largest (smallest unless `largest`) elements of arg along
        `dim` and their Int positions (torch.topk). k: an int or Int scalar, 0 <= k <= the
        axis' size. Unless `sorted`, the k come in an order the library picks."""
        self._fd.check_open("topk")
        from kfuse.ir.sort_ops import build_topk

        return build_topk(self._b, arg, k, dim, largest, sorted)

    def argsort(
        self, arg: Val, dim: int = -1, descending: bool = False, stable: bool = False
    ) -> TensorView:
        """The Int positions that sort arg along `dim` (torch.argsort; NaN sorts as the
        largest value). With `stable`, equal elements keep their order."""
        self._fd.check_open("argsort")
        from kfuse.ir.sort_ops import build_argsort

        return build_argsort(self._b, arg, dim, descending, stable)

    def scatter(self, arg: Val, index: Val, src: Operand, dim: int) -> TensorView:
        """Out-of-place torch.scatter(arg, dim, index, src): a copy of arg with src (a tensor
        of arg's dtype and rank, at least the index's size on each axis, or a number) written
        at the index's positions along `dim`. Positions are checked to be inside the axis;
        where the index repeats one, which value lands there is the library's choice."""
        self._fd.check_open("scatter")
        from kfuse.ir.sort_ops import build_scatter

        return build_scatter(self._b, arg, index, src, dim)

    def sdpfa_fwd(
        self,
        query: Val,
        key: Val,
        value: Val,
        bias: Operand | None = None,  # a number: Thunder's positional dropout_p (below)
        mask: Operand | None = None,
        dropout_p: ScalarOperand | None = None,
        is_causal: ScalarOperand | None = None,
        scale: ScalarOperand | None = None,
    ) -> list[TensorView]:
        """Flash attention's forward: [output [N*, H, L, Ev], logsumexp [N*, H, L] Float,
        philox_seed, philox_offset] for query [N*, H, L, E], key [N*, H, S, E], value
        [N*, H, S, Ev] (N*: one or more batch axes), an optional bias (added to the scaled
        scores) and an optional Bool mask (false: the score is -inf). Query, key and value
        are Half or BFloat16 (with a bias or mask, Float too); bias has their dtype and mask
        is Bool, each of their rank, broadcast to the scores [N*, H, L, S]. dropout_p
        (default 0; with a bias or mask an InputError), is_causal (default False) and scale
        (default 1/sqrt(E)): numbers or scalars. philox_seed/offset are Int tensors ([2] and
        []) of the dropout generator's 64-bit state, for sdpfa_bwd (zeros with a bias or
        mask). A query row with no key left gives 0 and a logsumexp of -inf. Runs on torch
        tensors (CUDA; on CPU without dropout).

        The order before bias and mask existed, (query, key, value, dropout_p, is_causal,
        scale), is taken too: Thunder 0.2.6 passes its six arguments positionally so. A number
        or scalar where bias goes, with is_causal and scale left unset, is read that way."""
        self._fd.check_open("sdpfa_fwd")
        if _is_number_or_scalar(bias) and is_causal is None and scale is None:
            bias, mask, dropout_p, is_causal, scale = None, None, bias, mask, dropout_p
        from kfuse.ir.attention_ops import build_sdpfa_fwd

        return build_sdpfa_fwd(self._b, query, key, value, bias, mask, dropout_p, is_causal, scale)

    def sdpfa_bwd(
        self,
        grad_output: Val,
        query: Val,
        key: Val,
        value: Val,
        output: Val,
        logsumexp: Val,
        dropout_p: ScalarOperand | None,
        is_causal: ScalarOperand | None,
        philox_seed: Val,
        philox_offset: Val,
        scale: ScalarOperand | None,
    ) -> list[TensorView]:
        """Flash attention's backward: [grad_query, grad_key, grad_value], from sdpfa_fwd's
        operands and outputs (the same dropout_p, is_causal and scale; scale None: 1/sqrt(E)).
        It takes no bias or mask (nvFuser's neither): an sdpfa_fwd that had one feeding it
        is a DefinitionError."""
        self._fd.check_open("sdpfa_bwd")
        from kfuse.ir.attention_ops import build_sdpfa_bwd

        return build_sdpfa_bwd(
            self._b,
            grad_output,
            query,
            key,
            value,
            output,
            logsumexp,
            dropout_p,
            is_causal,
            philox_seed,
            philox_offset,
            scale,
        )

    def grouped_mm(self, mat1: Val, mat2: Val, offsets: Val) -> TensorView:
        """torch._grouped_mm: matrix products over groups that the 1-D integer `offsets`
        (cumulative group ends) delimit: [m, k] @ [k, n] -> [g, m, n] (groups split k),
        [m, k] @ [g, k, n] -> [m, n] (they split m), [g, m, k] @ [k, n] -> [m, n] (they split
        n). Floating operands of one dtype; runs on torch tensors."""
        self._fd.check_open("grouped_mm")
        from kfuse.ir.library_ops import build_grouped_mm

        return build_grouped_mm(self._b, mat1, mat2, offsets)


def _is_number_or_scalar(value: Any) -> bool:
    return isinstance(value, (Scalar, bool, int, float))
