"""KFUSE_DUMP: the compiler's stages written out as they run, for a person to read.

KFUSE_DUMP names the stages (comma-separated; ``all`` for every one):

* segments: how a fusion that no single scheduler takes was split;
* params: the scheduler and the parameters chosen for each input signature;
* spec: each generated kernel's codegen spec (what its source depends on);
* cuda: each kernel's CUDA source, one file per kernel.

Everything goes under KFUSE_DUMP_DIR (default ./kfuse-dump), in a folder per fusion named by
a hash of its structure (the kernels' names carry the same kind of hash): segments.txt,
params.txt and spec.txt grow by one record per compile; <kernel name>.cu is written once.
Nothing is written, and nothing is computed for it, when KFUSE_DUMP is unset.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kfuse import knobs
from kfuse.errors import InputError
from kfuse.ir.fusion import Fusion

STAGES = ("segments", "params", "spec", "cuda")


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


def generated(fusion: Fusion, kernels: list[Any]) -> None:
    """The generated kernels' specs (stage spec) and CUDA sources (stage cuda)."""
    if enabled("spec"):
        stage("spec", fusion, lambda: "\n".join(f"{k.name}: {k.spec!r}" for k in kernels))
    if enabled("cuda"):
        for k in kernels:
            (folder(fusion) / f"{k.name}.cu").write_text(k.source)
