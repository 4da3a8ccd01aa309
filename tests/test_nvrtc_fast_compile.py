"""kfuse compiles kernels with NVRTC's fast-compile options (--minimal, the runtime header as
an automatic precompiled header): the cubins are those of the plain compile, byte for byte,
and a kernel's error still names its line."""

from __future__ import annotations

import numpy as np
import pytest

import kfuse
from kfuse import _C, DataType, FusionDefinition
from kfuse.runtime.backends.cuda import (
    FAST_COMPILE_OPTIONS,
    NVRTC_OPTIONS,
    compile_to_cubin,
    compile_to_ptx,
    fitted_compile,
    nvrtc_options,
    nvrtc_program,
)
from kfuse.runtime.runtime_header import RUNTIME_HEADER_NAME, runtime_header
from source_corpus import recorded_sources

pytestmark = pytest.mark.skipif(
    _C.nvrtc_version() < (12, 8), reason="NVRTC before 12.8 has no --pch and --minimal"
)


def _kernels() -> list[tuple[str, str]]:
    """(name, source) of pointwise, reduction and persistent (layer norm) kernels, as the
    emulator's H200 profile schedules them."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        mean = fd.ops.div(fd.ops.sum(x, dims=[1]), fd.ops.cast(fd.ops.size(x, 1), DataType.Float))
        d = fd.ops.sub(x, fd.ops.broadcast(mean, [False, True]))
        fd.add_output(fd.ops.cast(d, DataType.BFloat16))
    with FusionDefinition() as pointwise:
        x = pointwise.define_tensor(shape=[-1], dtype=DataType.Float)
        pointwise.add_output(pointwise.ops.tanh(x))
    found: list[tuple[str, str]] = []
    with recorded_sources(found):
        for f, shape in [(fd, (64, 4096)), (fd, (4, 100000)), (pointwise, (5000,))]:
            f.execute([np.ones(shape, dtype=np.float32)])
    return found


def test_the_runtime_header_goes_in_as_an_include() -> None:
    (name, source), *_ = _kernels()
    program, headers = nvrtc_program(source, nvrtc_options())
    assert headers == [(RUNTIME_HEADER_NAME, runtime_header())]
    assert program.startswith(f'#include "{RUNTIME_HEADER_NAME}"\n')
    assert program.splitlines()[1:] == source[len(runtime_header()) :].splitlines()[1:]
    assert nvrtc_program(source, list(NVRTC_OPTIONS)) == (source, [])  # no --pch: as it is
    assert set(FAST_COMPILE_OPTIONS) <= set(nvrtc_options())


@pytest.mark.slow
def test_cubins_and_ptx_are_those_of_the_plain_compile() -> None:
    kernels = _kernels()
    assert len(kernels) >= 3
    # --no-cache on both: NVRTC would otherwise hand the second compile the first's output.
    plain = [*NVRTC_OPTIONS, "--no-cache"]
    fast = [*nvrtc_options(), "--no-cache"]
    for name, source in kernels:
        # The source NVRTC compiles: the kernel's, with launch bounds fitted to its registers.
        fitted, _ = fitted_compile(source, name, "sm_90", plain)
        expected = _C.compile_to_cubin(fitted, name + ".cu", "sm_90", plain)
        assert compile_to_cubin(source, name, "sm_90", fast) == expected, name
        for _ in range(2):  # the second compile uses the precompiled header the first made
            assert compile_to_cubin(source, name, "sm_90", fast) == expected, name
        ptx = _C.compile_to_ptx(fitted, name + ".cu", "sm_90", plain)
        assert compile_to_ptx(source, name, "sm_90", fast) == ptx, name


def test_an_error_in_the_kernel_names_its_line() -> None:
    name, source = _kernels()[0]
    bad = source.replace(
        'extern "C"', 'extern "C" __device__ int oops = undefined_name;\nextern "C"', 1
    )
    with pytest.raises(kfuse.CompileError) as info:
        compile_to_cubin(bad, name, "sm_90", nvrtc_options())
    assert "undefined_name" in info.value.log and f"{name}.cu(" in info.value.log
