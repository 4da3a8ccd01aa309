"""A source edit for tools/kernel_times.py --edit and tools/kernel_sass.py --edit (2026-12-04,
not measured on a GPU): the row-split broadcast loads of a group norm (a weight per channel
inside each group's row) divide a vector's position by the channel's extent with signed `/`
and `%` once a vector and input; kf::index_div / kf::index_mod divide unsigned. In sm_90 SASS
(tools/kernel_sass.py): group norm forward g32 [32, 128, 64, 64] 1760 -> 1688 instructions
and 64 -> 56 registers, [64, 256, 56, 56] 1584 -> 1520, g8 [32, 128, 64, 64] 3224 -> 3072.
If it pays on the GPU, the change belongs in kfuse.codegen.row_split."""

import re


def edit(name: str, source: str) -> str:
    source = re.sub(r"kf_rem /= ([^;]+);", r"kf_rem = kf::index_div(kf_rem, (Index)(\1));", source)
    return re.sub(r"= kf_rem % ([^;]+);", r"= kf::index_mod(kf_rem, (Index)(\1));", source)
