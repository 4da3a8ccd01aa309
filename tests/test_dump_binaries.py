"""KFUSE_DUMP=compile without a GPU: PTX from NVRTC for the architecture and options of the
real compile (a fusion compiled as for an H100-class device, its kernels not loaded), the
SASS file's message when no disassembler is found (and the SASS where one is), and the
emulator's files that say PTX and SASS do not apply."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kfuse import FusionDefinition
from kfuse.engine import compiler, dump
from kfuse.errors import InputError
from kfuse.runtime.backends.cuda import nvrtc_options
from kfuse.runtime.info import CUDA, build_runtime_info


def softmax() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.softmax(x, -1))
    return fd


def nvrtc_or_skip() -> None:
    from kfuse.runtime import nvrtc_loader

    try:
        nvrtc_loader.ensure_loaded()
    except Exception as exc:  # no NVRTC wheel or toolkit on this machine
        pytest.skip(f"needs NVRTC ({exc})")


def nvrtc_and_nvdisasm_or_skip() -> None:
    """Skip where NVRTC or nvdisasm is missing (kfuse[test] installs both, so CI has them):
    for the tests that read a kernel's SASS."""
    nvrtc_or_skip()
    if dump.find_disassembler()[0] is None:
        pytest.skip("needs nvdisasm (pip install nvidia-cuda-nvdisasm: kfuse[test] has it)")


class _NotLoaded:
    """What KernelCompiler.compile returns here: the kernel is compiled for the dump only."""


def compile_as_for_a_gpu(
    monkeypatch: pytest.MonkeyPatch,
    stages: str,
    out: Path,
    fd: FusionDefinition | None = None,
    inputs: list[Any] | None = None,
) -> Any:
    """The Program of `fd` (default a softmax of `inputs`, default one [64, 300] float32) as a
    CUDA device of the emulator's profile (sm_90) gets it, with KFUSE_DUMP=`stages` into `out`;
    nothing is loaded or run."""
    monkeypatch.setenv("KFUSE_DUMP", stages)
    monkeypatch.setenv("KFUSE_DUMP_DIR", str(out))
    monkeypatch.setattr(compiler.KernelCompiler, "compile", lambda *args: _NotLoaded())
    fd = fd or softmax()
    info = build_runtime_info(fd.fusion, inputs or [np.ones((64, 300), np.float32)])
    as_gpu = dataclasses.replace(info, backend=CUDA)
    assert as_gpu.device.arch == "sm_90"
    return compiler.compile_fusion(fd.fusion, as_gpu, None, segment=False)


def no_disassembler(monkeypatch: pytest.MonkeyPatch, empty: Path) -> None:
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(dump, "CUDA_FOLDERS", ())
    monkeypatch.setattr(dump, "wheel_bin_folders", lambda: [])


def test_ptx_is_nvrtcs_for_the_real_arch_and_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvrtc_or_skip()
    program = compile_as_for_a_gpu(monkeypatch, "compile", tmp_path)
    (launch,) = program.launches
    (ptx,) = tmp_path.rglob("*.ptx")
    assert ptx.name == f"{launch.name}.sm_90.ptx"
    text = ptx.read_text()
    options = " ".join(nvrtc_options(tuple(program.params.cparams.nvrtc_options())))
    assert text.startswith(f"// ptx of {launch.name} for sm_90, NVRTC options: {options}\n")
    assert "--fmad=false" in options
    assert ".target sm_90" in text and f".entry {launch.name}(" in text
    (sass,) = tmp_path.rglob("*.sass")  # the same stage's other file
    assert sass.name == f"{launch.name}.sm_90.sass"
    assert not list(tmp_path.rglob("*.cu"))  # the kernels stage's, not asked for


def test_sass_says_why_there_is_none_without_a_disassembler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvrtc_or_skip()
    no_disassembler(monkeypatch, tmp_path / "bin")
    assert dump.find_disassembler() == (None, ["PATH"])
    program = compile_as_for_a_gpu(monkeypatch, "compile", tmp_path / "dump")
    (sass,) = (tmp_path / "dump").rglob("*.sass")
    assert sass.name == f"{program.launches[0].name}.sm_90.sass"
    text = sass.read_text()
    assert "no SASS: found no disassembler (nvdisasm or cuobjdump) in PATH" in text
    assert "pip install nvidia-cuda-nvdisasm" in text


def test_sass_is_the_cubin_disassembled_where_a_disassembler_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvrtc_or_skip()
    tool, tried = dump.find_disassembler()
    if tool is None:
        pytest.skip(f"no nvdisasm or cuobjdump in {', '.join(tried)}")
    program = compile_as_for_a_gpu(monkeypatch, "compile", tmp_path)
    (sass,) = tmp_path.rglob("*.sass")
    text = sass.read_text()
    assert f"// disassembled by {tool}\n" in text
    assert program.launches[0].name in text and "EXIT" in text


def test_a_disassembler_is_found_where_cuda_home_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_disassembler(monkeypatch, tmp_path / "empty")
    tool = tmp_path / "cuda" / "bin" / "cuobjdump"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert dump.find_disassembler() == (str(tool), [])


def test_a_failing_disassembler_is_written_down_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvrtc_or_skip()
    no_disassembler(monkeypatch, tmp_path / "bin")
    tool = tmp_path / "bin" / "nvdisasm"
    tool.write_text("#!/bin/sh\necho 'cannot read it' >&2\nexit 3\n")
    tool.chmod(0o755)
    compile_as_for_a_gpu(monkeypatch, "compile", tmp_path / "dump")
    (sass,) = (tmp_path / "dump").rglob("*.sass")
    assert f"no SASS: {tool} exited with 3:\ncannot read it" in sass.read_text()


def test_on_the_emulator_ptx_and_sass_say_they_do_not_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFUSE_DUMP", "compile")
    monkeypatch.setenv("KFUSE_DUMP_DIR", str(tmp_path))
    fd = softmax()
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    (out,) = fd.execute([x])
    assert np.allclose(out.sum(axis=1), 1.0, atol=1e-5)
    name = fd.last_program().launches[0].name
    for suffix in ("ptx", "sass"):
        text = next(tmp_path.rglob(f"{name}.{suffix}")).read_text()
        assert text.startswith(f"// {suffix} does not apply: {name} runs on kfuse's host emulator")


def test_ptx_and_sass_cost_nothing_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*args: Any) -> str:
        raise AssertionError("compiled for a dump nobody asked for")

    monkeypatch.setattr(dump, "_ptx", never)
    monkeypatch.setattr(dump, "_sass", never)
    monkeypatch.setattr(dump, "find_disassembler", never)
    compile_as_for_a_gpu(monkeypatch, "kernels", tmp_path)
    assert list(tmp_path.rglob("*.cu")) and not list(tmp_path.rglob("*.ptx"))


def test_an_unknown_stage_names_the_compilers_stages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KFUSE_DUMP", "compile,sass")
    with pytest.raises(
        InputError,
        match=r"KFUSE_DUMP: unknown stage 'sass' \(stages: canonicalize, partition, params, "
        r"kernels, compile, program, or all\)",
    ):
        softmax().execute([np.ones((8, 16), np.float32)])
    monkeypatch.setenv("KFUSE_DUMP", "Compile, PARAMS")
    assert dump.enabled("compile") and dump.enabled("params") and not dump.enabled("kernels")
