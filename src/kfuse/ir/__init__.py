"""The Fusion IR: Vals (TensorView, Scalar), Exprs, Fusion, and the op table.

See docs/INTERFACES.md ("Fusion IR"). Built by kfuse.frontend; walked by the reference, the
schedulers and the code generator.
"""

from kfuse.ir.exprs import (
    EXPR_CLASSES,
    LIBRARY_EXPRS,
    POINTWISE_EXPRS,
    BinaryOp,
    BroadcastOp,
    CastOp,
    CatOp,
    ExpandOp,
    Expr,
    GatherOp,
    GeneratedOp,
    IndexSelectOp,
    LinearOp,
    MatmulOp,
    PadOp,
    PermuteOp,
    ReductionOp,
    ReshapeOp,
    SegmentSetOp,
    SizeOp,
    SliceOp,
    SqueezeOp,
    StrideOrderOp,
    TernaryOp,
    UnaryOp,
    WelfordOp,
)
from kfuse.ir.fusion import Fusion
from kfuse.ir.ops import OPS, OpInfo
from kfuse.ir.values import Axis, Scalar, TensorView, Val

__all__ = [
    "Axis",
    "Val",
    "TensorView",
    "Scalar",
    "Expr",
    "UnaryOp",
    "BinaryOp",
    "TernaryOp",
    "CastOp",
    "SegmentSetOp",
    "StrideOrderOp",
    "BroadcastOp",
    "ExpandOp",
    "SqueezeOp",
    "PermuteOp",
    "ReshapeOp",
    "SliceOp",
    "PadOp",
    "CatOp",
    "IndexSelectOp",
    "GatherOp",
    "GeneratedOp",
    "ReductionOp",
    "WelfordOp",
    "SizeOp",
    "MatmulOp",
    "LinearOp",
    "LIBRARY_EXPRS",
    "EXPR_CLASSES",
    "POINTWISE_EXPRS",
    "Fusion",
    "OPS",
    "OpInfo",
]
