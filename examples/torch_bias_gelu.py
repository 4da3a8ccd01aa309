"""A fused bias + GELU on torch tensors: half-precision activations in, the math in float32,
half out, in one kernel.

On a machine with a CUDA GPU the tensors live there; elsewhere CPU tensors run on kfuse's host
emulator. The result is checked against torch.nn.functional.gelu; exit status 1 if it differs.
"""

import sys

try:
    import torch
except ImportError:
    print("skipped: torch is not installed (pip install torch)")
    sys.exit(0)

from kfuse import DataType, FusionDefinition

with FusionDefinition() as fd:
    x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Half)
    bias = fd.define_tensor(shape=[-1], dtype=DataType.Float)
    xf = fd.ops.cast(x, DataType.Float)
    y = fd.ops.add(xf, fd.ops.broadcast(bias, is_broadcast_dim=[True, False]))
    fd.add_output(fd.ops.cast(fd.ops.gelu(y), DataType.Half))

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
xs = torch.randn(256, 512, device=device, dtype=torch.float16)
bs = torch.randn(512, device=device, dtype=torch.float32)
(out,) = fd.execute([xs, bs])  # a torch tensor on xs's device

expected = torch.nn.functional.gelu(xs.float() + bs).half()
try:
    torch.testing.assert_close(out, expected)
except AssertionError as exc:
    sys.exit(f"mismatch: {exc}")
print(f"bias + GELU on {device}: {tuple(out.shape)} {out.dtype}, matches torch")
