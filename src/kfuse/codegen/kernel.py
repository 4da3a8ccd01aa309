"""The signature of a generated kernel: its attributes, name and parameters, written once for
the pointwise, reduction (inner, outer, finalize) and persistent kernels."""

from __future__ import annotations


def kernel_header(
    name: str,
    params: list[str],
    threads: int,
    *,
    bounded: bool = True,
    min_blocks: int | None = None,
    cluster: int = 1,
) -> list[str]:
    """The lines opening kernel `name` (up to its body's brace).

    bounded: __launch_bounds__(threads[, min_blocks]), which lets NVVM budget registers for
    the block size; a kernel compiled with a register limit (CompileParams.maxrregcount) has
    none, because NVRTC does not apply --maxrregcount to a kernel with launch bounds (one
    bounded to 128 threads kept 40 to 48 registers under --maxrregcount=32; unbounded, 32).
    cluster: thread-block cluster size along x (sm_90+), > 1 adds __cluster_dims__."""
    attributes = []
    if bounded:
        blocks = "" if min_blocks is None else f", {min_blocks}"
        attributes.append(f"__launch_bounds__({threads}{blocks})")
    if cluster > 1:
        attributes.append(f"__cluster_dims__({cluster}, 1, 1)")
    prefix = "".join(f"{a} " for a in attributes)
    return [
        f'extern "C" __global__ void {prefix}{name}(',
        "    " + ",\n    ".join(params) + ") {",
    ]
