"""Where NVRTC's time goes on this machine: the kernels of random campaign examples, each
compiled with kfuse's options and with variants (--minimal, the runtime header as an
automatic precompiled header), timed, and their cubins compared with the plain compile's.

    python3 tools/nvrtc_probe.py [EXAMPLES] [SEED]

Kernel sources come from the host emulator's path with the H200 profile (no GPU needed)."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("KFUSE_EMULATOR_PROFILE", "h200")

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kfuse import _C  # noqa: E402
from kfuse.campaign.property import ExampleSpace, examples  # noqa: E402
from kfuse.runtime.backends.cuda import (  # noqa: E402
    FAST_COMPILE_OPTIONS,
    NVRTC_OPTIONS,
    nvrtc_program,
)
from kfuse.runtime.runtime_header import runtime_header  # noqa: E402
from source_corpus import recorded_sources  # noqa: E402


def sources(n: int, seed_value: int) -> list[tuple[str, str]]:
    space = ExampleSpace(framework="numpy", device="cpu")
    found: list[tuple[str, str]] = []

    @settings(
        max_examples=n,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @seed(seed_value)
    @given(st.data())
    def one(data):  # type: ignore[no-untyped-def]
        ex = data.draw(examples(space))
        try:
            with recorded_sources(found):
                ex.fd.execute(ex.inputs)
        except Exception:  # noqa: BLE001, S110 - only the sources matter here
            pass

    one()
    unique = {src: name for name, src in found}
    return [(name, src) for src, name in unique.items()]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40

    def compile_once(src: str, options: list[str]) -> tuple[float, bytes]:
        program, headers = nvrtc_program(src, options)
        started = time.perf_counter()
        cubin = _C.compile_to_cubin(program, "probe.cu", "sm_90", options, headers)
        return time.perf_counter() - started, cubin

    # --no-cache: NVRTC 13 keeps what it generated and would hand a variant the PTX and
    # cubin of the plain compile of the same kernel.
    base = [*NVRTC_OPTIONS, "--no-cache"]
    pch = [o for o in FAST_COMPILE_OPTIONS if o != "--minimal"]
    variants = {
        "plain": base,
        "minimal": [*base, "--minimal"],
        "pch": [*base, *pch],
        "pch+minimal": [*base, *FAST_COMPILE_OPTIONS],
    }
    kernels = sources(n, int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    times: dict[str, list[float]] = {v: [] for v in variants}
    differ = 0
    for _, src in kernels:
        reference = None
        for label, options in variants.items():
            seconds, cubin = compile_once(src, options)
            times[label].append(seconds)
            reference = cubin if reference is None else reference
            differ += cubin != reference
    trivial = 'extern "C" __global__ void probe_trivial(float* a) { a[threadIdx.x] *= 2.0f; }\n'
    fixed = min(compile_once(trivial, base)[0] for _ in range(3))
    with_header = min(compile_once(runtime_header() + trivial, base)[0] for _ in range(3))
    print(f"{len(kernels)} unique kernels of {n} examples; {differ} cubins differ from plain")
    print(
        f"trivial kernel {1e3 * fixed:.1f} ms, with the runtime header {1e3 * with_header:.1f} ms"
    )
    for label, ts in times.items():
        print(
            f"{label:12s} mean {1e3 * statistics.mean(ts):6.1f} ms  median "
            f"{1e3 * statistics.median(ts):6.1f} ms  max {1e3 * max(ts):6.1f} ms"
        )


if __name__ == "__main__":
    main()
