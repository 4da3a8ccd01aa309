"""Run one bf16 norm over dim 0 a few times, for Nsight Compute to profile its kernels:

    ncu --kernel-name regex:kfuse_ python3 tools/norm0_case.py 8000 64

(the fusion is benchmarks/probe.py's `_norm_over_leading_axes`; the first call compiles).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import torch  # noqa: E402
from probe import _norm_over_leading_axes  # noqa: E402

from kfuse.dtypes import DataType  # noqa: E402

rows, cols = int(sys.argv[1]), int(sys.argv[2])
fd = _norm_over_leading_axes(DataType.BFloat16, 2, False)
x = torch.randn(rows, cols, device="cuda").to(torch.bfloat16)
for _ in range(3):
    fd.execute([x])
torch.cuda.synchronize()
print("segments:", fd.segments([x]))
