"""CUDA graph capture: whether the stream a call runs on is being captured, and the error for
what kfuse cannot do while it is.

A captured call records its kernel launches (and its framework's allocations and copies)
into the graph; a replay repeats them with the argument values of the capture. That covers
a fusion's generated kernels and its library calls. It does not cover work the host does
with device data: a check that reads an index array back to the host (it waits for the GPU,
which a capture forbids, and a replay would not repeat it), or a value a launch takes from
the host at launch time that must change on every replay (a stateful random op's seed and
offset). Those raise `refuse_under_capture`'s InputError instead of calling a synchronizing
API under capture (which invalidates the capture) or replaying a stale value.

The question is asked of the framework that owns the call's stream: torch's
is_current_stream_capturing() for torch tensors, CuPy's Stream.is_capturing() (the runtime's
cudaStreamIsCapturing) of its current stream for CuPy arrays; a stream= handle is made
current for the call first (kfuse.runtime.arrays.stream_context), so it is the one asked.
"""

from __future__ import annotations

from kfuse.errors import InputError


def capturing(framework: str | None, device: int) -> bool:
    """Whether the framework's current stream on `device` (-1: host memory, never captured)
    is being captured into a CUDA graph."""
    if device < 0:
        return False
    if framework == "torch":
        import torch

        return bool(torch.cuda.is_current_stream_capturing())
    if framework == "cupy":
        try:
            import cupy
        except ImportError:  # no CuPy: no CuPy stream can be capturing
            return False
        with cupy.cuda.Device(device):
            try:
                return bool(cupy.cuda.get_current_stream().is_capturing())
            except RuntimeError:
                # The runtime refuses the query for the legacy stream while a blocking
                # stream captures: work on it would join that capture, so it counts as one.
                return True
    return False


def refuse_under_capture(framework: str | None, device: int, what: str, way_out: str) -> None:
    """InputError when the call's stream is being captured: `what` cannot be captured,
    `way_out` says what to do instead; nothing otherwise."""
    if capturing(framework, device):
        raise InputError(f"under CUDA graph capture: {what}. {way_out}")
