"""A softmax over the rows of a CuPy array, in one kernel: each row read once, its max, its
sum of exponentials and the quotient computed on chip.

Needs CuPy and an NVIDIA GPU (skipped, with the reason, where either is missing). The output
is a cupy.ndarray on the input's device, computed on CuPy's current stream. Checked against
a softmax written with CuPy; exit status 1 if they differ.
"""

import sys

try:
    import cupy
except ImportError:
    print("skipped: CuPy is not installed (pip install cupy-cuda13x, on a machine with a GPU)")
    sys.exit(0)
try:
    gpus = cupy.cuda.runtime.getDeviceCount()
except cupy.cuda.runtime.CUDARuntimeError:
    gpus = 0
if gpus == 0:
    print("skipped: CuPy finds no GPU")
    sys.exit(0)

from kfuse import DataType, FusionDefinition

with FusionDefinition() as fd:
    x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
    fd.add_output(fd.ops.softmax(x, dim=1))

xs = cupy.random.default_rng(0).standard_normal((512, 1000), dtype=cupy.float32)
(out,) = fd.execute([xs])  # a cupy.ndarray

e = cupy.exp(xs - xs.max(axis=1, keepdims=True))
expected = e / e.sum(axis=1, keepdims=True)
if not cupy.allclose(out, expected, rtol=1e-5, atol=1e-6):
    sys.exit(f"mismatch: largest difference {float(abs(out - expected).max())}")
print(f"softmax ({fd.last_scheduler()}) on the GPU: {out.shape} {out.dtype}, matches CuPy")
