"""A layer norm of bfloat16 rows with fd.ops.layer_norm: each row read once, normalized in
float32, with a weight and a bias, in one kernel (kfuse's inner_persistent scheduler).

CUDA tensors where a GPU is present, else CPU tensors on kfuse's host emulator. Checked
against torch.nn.functional.layer_norm; exit status 1 if it differs.
"""

import sys

try:
    import torch
except ImportError:
    print("skipped: torch is not installed (pip install torch)")
    sys.exit(0)

from kfuse import DataType, FusionDefinition

with FusionDefinition() as fd:
    x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
    w = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
    b = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
    fd.add_output(fd.ops.layer_norm(x, w, b, eps=1e-5))

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
xs = torch.randn(32, 1024, device=device, dtype=torch.bfloat16)
ws = torch.randn(1024, device=device, dtype=torch.bfloat16)
bs = torch.randn(1024, device=device, dtype=torch.bfloat16)
(out,) = fd.execute([xs, ws, bs])

expected = torch.nn.functional.layer_norm(xs.float(), (1024,), ws.float(), bs.float(), 1e-5)
try:
    torch.testing.assert_close(out, expected.bfloat16())
except AssertionError as exc:
    sys.exit(f"mismatch: {exc}")
shape = tuple(out.shape)
print(f"layer norm ({fd.last_scheduler()}) on {device}: {shape} {out.dtype}, matches torch")
