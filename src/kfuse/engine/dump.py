"""KFUSE_DUMP: the compiler's stages (kfuse.engine.compiler) written out as they run, for a
person to read.

KFUSE_DUMP names the stages, by the compiler's names for them (comma-separated; ``all`` for
every one):

* canonicalize: the canonical fusion every later stage sees, as a Python definition (once
  per definition);
* partition: which scheduler takes the whole fusion, the boundary views folded into its
  operands, or the segments it was split into;
* params: the scheduler and the parameters chosen;
* kernels: each generated kernel's codegen spec (what its source depends on) and its CUDA
  source, one file per kernel;
* compile: the PTX NVRTC makes of each kernel's source, for the architecture and with the
  options of its real compile (compiled once more, only for the dump), and the cubin of that
  compile disassembled (SASS) by nvdisasm or cuobjdump if one is found (on PATH, in
  $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin or an nvidia wheel's bin); else the
  file says what was looked for;
* program: the Program the executor runs for the signature (its scheduler, params and
  launches).

Everything goes under KFUSE_DUMP_DIR (default ./kfuse-dump), in a folder per fusion named by
a hash of its structure (the kernels' names carry the same kind of hash):
canonicalize.txt, partition.txt, params.txt, kernels.txt and program.txt grow by one record
per compile; <kernel name>.cu, <kernel name>.<arch>.ptx and <kernel name>.<arch>.sass are
written at each compile. Each segment of a segmented fusion has its own folder. On the host
emulator, which compiles with the host's C++ compiler, <kernel name>.ptx and .sass say that
they do not apply. A PTX or SASS dump that cannot be made says why in its file; it never
fails the run. Nothing is written, and nothing is computed for it, when KFUSE_DUMP is unset.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kfuse import knobs
from kfuse.errors import InputError
from kfuse.ir.fusion import Fusion

STAGES = ("canonicalize", "partition", "params", "kernels", "compile", "program")
"""The compiler's stages, in order (kfuse.engine.compiler's stage_<name> functions)."""

DISASSEMBLERS = {"nvdisasm": ("-c",), "cuobjdump": ("-sass",)}
"""The tools a sass dump tries, in this order, with the arguments before the cubin's path."""
CUDA_FOLDERS = ("/usr/local/cuda/bin",)
"""Where a CUDA toolkit's tools are when neither PATH nor CUDA_HOME / CUDA_PATH say."""


def enabled(stage: str) -> bool:
    """Whether KFUSE_DUMP asks for `stage`; InputError naming any unknown stage."""
    names = knobs.get().dump
    if not names:
        return False
    unknown = [n for n in names if n not in STAGES and n != "all"]
    if unknown:
        raise InputError(
            f"KFUSE_DUMP: unknown stage {unknown[0]!r} (stages: {', '.join(STAGES)}, or all)"
        )
    return stage in names or "all" in names


def folder(fusion: Fusion) -> Path:
    """The folder of `fusion`'s dumps (created)."""
    digest = hashlib.sha1(repr(fusion.structure()).encode()).hexdigest()[:16]
    path = Path(knobs.get().dump_dir) / f"fusion_{digest}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def stage(name: str, fusion: Fusion, text: Callable[[], str]) -> None:
    """Append `text()` to the fusion's <name>.txt when KFUSE_DUMP asks for stage `name`."""
    if not enabled(name):
        return
    with open(folder(fusion) / f"{name}.txt", "a") as f:
        f.write(text().rstrip("\n") + "\n\n")


def kernels(fusion: Fusion, generated: list[Any]) -> None:
    """Stage kernels: the generated kernels' specs (kernels.txt) and CUDA sources."""
    if not enabled("kernels"):
        return
    stage("kernels", fusion, lambda: "\n".join(f"{k.name}: {k.spec!r}" for k in generated))
    for k in generated:
        (folder(fusion) / f"{k.name}.cu").write_text(k.source)


def compiled(fusion: Fusion, kernels: list[Any], target: tuple[str, list[str]] | None) -> None:
    """Stage compile: the kernels' PTX and SASS. `target`: (architecture, NVRTC options) of
    their real compile (kfuse.engine.compiler.KernelCompiler.nvrtc_target), or None on the
    emulator, where the files say that they do not apply."""
    if not enabled("compile"):
        return
    for suffix, make in (("ptx", _ptx), ("sass", _sass)):
        for k in kernels:
            if target is None:
                text = (
                    f"// {suffix} does not apply: {k.name} runs on kfuse's host emulator, "
                    "which compiles its CUDA source with the host's C++ compiler (no NVRTC, "
                    "no PTX, no cubin)\n"
                )
                (folder(fusion) / f"{k.name}.{suffix}").write_text(text)
                continue
            arch, options = target
            header = f"// {suffix} of {k.name} for {arch}, NVRTC options: {' '.join(options)}\n"
            (folder(fusion) / f"{k.name}.{arch}.{suffix}").write_text(
                header + make(k.source, k.name, arch, options)
            )


def _ptx(source: str, name: str, arch: str, options: list[str]) -> str:
    from kfuse.runtime.backends.cuda import compile_to_ptx

    try:
        return compile_to_ptx(source, name, arch, options)
    except Exception as exc:  # the real compile succeeded; a dump never fails the run
        return f"// no PTX: {type(exc).__name__}: {exc}\n"


def _sass(source: str, name: str, arch: str, options: list[str]) -> str:
    from kfuse.runtime.backends.cuda import compile_to_cubin

    tool, tried = find_disassembler()
    if tool is None:
        return (
            "// no SASS: found no disassembler (nvdisasm or cuobjdump) in "
            + ", ".join(tried)
            + "; install one (pip install nvidia-cuda-nvdisasm, or a CUDA toolkit) or put it "
            "on PATH\n"
        )
    try:
        cubin = compile_to_cubin(source, name, arch, options)
        with tempfile.TemporaryDirectory(prefix="kfuse-sass-") as tmp:
            path = os.path.join(tmp, name + ".cubin")
            with open(path, "wb") as f:
                f.write(cubin)
            args = DISASSEMBLERS[os.path.basename(tool)]
            run = subprocess.run(
                [tool, *args, path], capture_output=True, text=True, timeout=120, check=False
            )
    except Exception as exc:
        return f"// no SASS: {type(exc).__name__}: {exc}\n"
    if run.returncode != 0:
        return f"// no SASS: {tool} exited with {run.returncode}:\n{run.stderr}"
    return f"// disassembled by {tool}\n{run.stdout}"


def find_disassembler(environ: Mapping[str, str] | None = None) -> tuple[str | None, list[str]]:
    """(the path of the first of DISASSEMBLERS found, or None; the places looked in): PATH,
    $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, then the bin folders of the nvidia
    wheels (nvidia-cuda-nvdisasm puts nvdisasm in nvidia/cu13/bin)."""
    env = os.environ if environ is None else environ
    folders = [
        *(os.path.join(env[v], "bin") for v in ("CUDA_HOME", "CUDA_PATH") if env.get(v)),
        *CUDA_FOLDERS,
        *wheel_bin_folders(),
    ]
    for tool in DISASSEMBLERS:
        found = shutil.which(tool, path=env.get("PATH", ""))
        if found is None:
            found = next((p for f in folders if _is_program(p := os.path.join(f, tool))), None)
        if found is not None:
            return found, []
    return None, ["PATH", *folders]


def wheel_bin_folders() -> list[str]:
    """The bin folders of the installed nvidia-* wheels (nvidia/<package>/bin)."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    found = []
    for root in roots:
        for entry in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            if os.path.isdir(path := os.path.join(root, entry, "bin")):
                found.append(path)
    return found


def _is_program(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)
