"""kfuse's quickstart: one fused kernel for y = relu(x * 2 + b), run on NumPy arrays.

Without a GPU, NumPy inputs run on kfuse's host emulator (the same generated CUDA source,
compiled for the CPU), so this script runs anywhere kfuse installs. It checks its result
against NumPy and exits 1 if they differ.
"""

import sys

import numpy as np

from kfuse import DataType, FusionDefinition

with FusionDefinition() as fd:
    x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)  # -1: any size
    b = fd.define_tensor(shape=[-1], dtype=DataType.Float)
    y = fd.ops.add(fd.ops.mul(x, 2.0), fd.ops.broadcast(b, is_broadcast_dim=[True, False]))
    fd.add_output(fd.ops.relu(y))

rng = np.random.default_rng(0)
xs = rng.standard_normal((64, 128), dtype=np.float32)
bs = rng.standard_normal(128, dtype=np.float32)
(out,) = fd.execute([xs, bs])  # a NumPy array

expected = np.maximum(xs * 2 + bs, 0)
if not np.allclose(out, expected, rtol=1e-6, atol=1e-6):
    sys.exit(f"mismatch: largest difference {np.abs(out - expected).max()}")
print(f"{fd.last_scheduler()} kernel: {out.shape} {out.dtype}, matches NumPy")
