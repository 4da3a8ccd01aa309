"""The program store (kfuse.engine.program_store): a new definition of a fusion already run
finds its program on disk and compiles nothing (no code generation; its kernels come from the
cubin or emulator cache), with the same program and the same results; anything the key covers
(the signature, a switch, the package's code) misses; a bad entry is removed with a warning and
the program compiled again; what the store does not keep is never written."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import shared_prebuilt
from gpu_support import cuda_torch, requires_gpu
from kfuse import DataType, FusionDefinition, switches
from kfuse.engine import executor, program_store
from kfuse.errors import InputError
from kfuse.schedule.types import SchedulerType


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The store on, in a private disk cache; returns its folder of programs."""
    shared_prebuilt.seed(tmp_path)
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KFUSE_PROGRAM_CACHE", "1")
    monkeypatch.delenv("KFUSE_DUMP", raising=False)
    return tmp_path / "program"


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The programs the executor compiles (the store's loads are not among them)."""
    made: list[Any] = []
    real = executor.compile_fusion

    def counted(*args: Any, **kwargs: Any) -> Any:
        program = real(*args, **kwargs)
        made.append(program)
        return program

    monkeypatch.setattr(executor, "compile_fusion", counted)
    return made


def rms_norm() -> FusionDefinition:
    """An RMS norm of bf16 rows with a weight and an epsilon given per call."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1], dtype=DataType.BFloat16)
        eps = fd.define_scalar(dtype=DataType.Double)
        xf = fd.ops.cast(x, DataType.Float)
        ms = fd.ops.mean(fd.ops.mul(xf, xf), dims=[1], keepdim=True)
        y = fd.ops.mul(
            fd.ops.mul(xf, fd.ops.rsqrt(fd.ops.add(ms, eps))), fd.ops.cast(w, DataType.Float)
        )
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    return fd


def rms_norm_reference(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    xf = x.astype(np.float64)
    return xf / np.sqrt((xf * xf).mean(axis=1, keepdims=True) + eps) * w.astype(np.float64)


def inputs(rows: int = 6, cols: int = 96, eps: float = 1e-6) -> list[Any]:
    rng = np.random.default_rng(rows * 1000 + cols)
    x = rng.standard_normal((rows, cols)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal(cols).astype(ml_dtypes.bfloat16)
    return [x, w, eps]


def check(fd: FusionDefinition, args: list[Any]) -> Any:
    (out,) = fd.execute(args)
    want = rms_norm_reference(*args)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-2, atol=2e-2)
    return out


def test_a_new_definition_loads_the_stored_program_and_compiles_nothing(
    store: Path, compiles: list[Any]
) -> None:
    first = rms_norm()
    check(first, inputs())
    assert len(compiles) == 1 and len(list(store.iterdir())) == 1
    again = rms_norm()
    out = check(again, inputs(eps=0.5))  # the scalar is a kernel argument: a new value runs
    assert len(compiles) == 1, "the second definition compiled instead of loading"
    built, loaded = first.last_program(), again.last_program()
    assert type(loaded) is type(built) and loaded.scheduler == built.scheduler
    assert loaded.params == built.params

    # (operands as their reprs: a scalar operand names a Val of its own definition's fusion)
    def launches(program: Any) -> list[tuple]:
        return [
            (k.name, k.source, k.grid, k.block, k.shared_mem, repr(k.operands))
            for k in program.launches
        ]

    assert launches(loaded) == launches(built)
    assert any(type(op).__name__ == "ScalarOperand" for op in loaded.launches[0].operands)
    assert out.dtype == ml_dtypes.bfloat16


def test_another_signature_misses(store: Path, compiles: list[Any]) -> None:
    check(rms_norm(), inputs())
    check(rms_norm(), inputs(rows=7))
    x, w, eps = inputs()
    check(rms_norm(), [x[:, ::2], w[::2], eps])  # strided rows: another layout
    assert len(compiles) == 3
    assert len(list(store.iterdir())) == 3


def test_a_switch_changed_in_the_process_misses(
    store: Path, compiles: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    check(rms_norm(), inputs())
    monkeypatch.setattr(switches, "SHARE_SINCOS", not switches.SHARE_SINCOS)
    check(rms_norm(), inputs())
    assert len(compiles) == 2


def test_another_build_of_the_package_misses(
    store: Path, compiles: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    check(rms_norm(), inputs())
    monkeypatch.setattr(program_store, "_fingerprint", "another build")
    check(rms_norm(), inputs())
    assert len(compiles) == 2


def test_the_fingerprint_follows_an_edit_of_a_package_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package = tmp_path / "kfuse"
    (package / "codegen").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    module = package / "codegen" / "pointwise.py"
    module.write_text("X = 1\n")
    monkeypatch.setattr(program_store, "PACKAGE_ROOT", package)
    monkeypatch.setattr(program_store, "_fingerprint", None)
    before = program_store.package_fingerprint()
    module.write_text("X = 22\n")  # another size
    monkeypatch.setattr(program_store, "_fingerprint", None)
    assert program_store.package_fingerprint() != before


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda blob: blob[: len(blob) - 7], id="truncated"),
        pytest.param(lambda blob: blob.replace(b"KFUSE", b"XFUSE", 1), id="not-an-entry"),
    ],
)
def test_a_damaged_entry_is_removed_with_a_warning_and_compiled_again(
    store: Path, compiles: list[Any], damage: Any
) -> None:
    check(rms_norm(), inputs())
    (entry,) = store.iterdir()
    entry.write_bytes(damage(entry.read_bytes()))
    with pytest.warns(RuntimeWarning, match="disk-cache entry"):
        check(rms_norm(), inputs())
    assert len(compiles) == 2
    check(rms_norm(), inputs())  # written again, whole
    assert len(compiles) == 2


def test_a_payload_that_does_not_load_back_is_removed_and_compiled_again(
    store: Path, compiles: list[Any]
) -> None:
    from kfuse.runtime import disk_cache

    check(rms_norm(), inputs())
    (entry,) = store.iterdir()
    # A well-formed entry (header and checksum right) whose pickle names a Val the fusion
    # does not have: what a program of another fusion under this key would hold.
    blob = entry.read_bytes()
    payload = blob[blob.index(b"\n", len(b"KFUSE-CACHE-ENTRY 2\n")) + 1 :]
    bad = payload.replace(b"val", b"vax")
    entry.write_bytes(disk_cache.pack(entry.name, program_store._identity(), bad))
    with pytest.warns(RuntimeWarning, match="does not load back"):
        check(rms_norm(), inputs())
    assert len(compiles) == 2


@pytest.mark.parametrize(
    "setting", [("KFUSE_PROGRAM_CACHE", "0"), ("KFUSE_CACHE_DIR", "off"), ("KFUSE_DUMP", "params")]
)
def test_nothing_is_stored_or_looked_up_when_off(
    store: Path,
    compiles: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    setting: tuple[str, str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv(*setting)
    monkeypatch.setenv("KFUSE_DUMP_DIR", str(tmp_path / "dump"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check(rms_norm(), inputs())
        check(rms_norm(), inputs())
    assert len(compiles) == 2
    assert not store.exists() or not any(store.iterdir())


def test_programs_it_does_not_keep_are_not_written(store: Path) -> None:
    """A library call (matmul) and a segmented fusion hold what an entry does not."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1])
        b = fd.define_tensor(shape=[-1, -1])
        fd.add_output(fd.ops.matmul(fd.ops.relu(fd.ops.matmul(a, b)), b))
    a = np.ones((4, 4), np.float32)
    (out,) = fd.execute([a, a])
    np.testing.assert_allclose(out, np.full((4, 4), 16.0))
    assert fd.last_program().scheduler in (SchedulerType.none, SchedulerType.expr_eval)
    assert not store.exists() or not any(store.iterdir())


def embedding() -> FusionDefinition:
    with FusionDefinition() as fd:
        table = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        ids = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        fd.add_output(fd.ops.mul(fd.ops.index_select(table, ids, dim=0), 2.0))
    return fd


def test_a_loaded_program_still_reports_a_position_outside_its_axis(
    store: Path, compiles: list[Any]
) -> None:
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    (out,) = embedding().execute([table, np.array([3, 9], np.int64)])
    np.testing.assert_array_equal(out, table[[3, 9]] * 2)
    fd = embedding()
    with pytest.raises(InputError, match=r"an index holds 10, outside the axis \(size 10\)"):
        fd.execute([table, np.array([3, 10], np.int64)])
    assert len(compiles) == 1
    (out,) = fd.execute([table, np.array([0, 1], np.int64)])
    np.testing.assert_array_equal(out, table[[0, 1]] * 2)


@requires_gpu
@pytest.mark.gpu
def test_a_new_definition_loads_the_stored_program_on_the_gpu(
    store: Path, compiles: list[Any]
) -> None:
    torch = cuda_torch()
    x, w, _ = inputs(rows=64, cols=4096)
    xt = torch.tensor(x.astype(np.float32)).to(torch.bfloat16).cuda()
    wt = torch.tensor(w.astype(np.float32)).to(torch.bfloat16).cuda()
    want = rms_norm_reference(x, w, 1e-5)
    for _ in range(2):
        (out,) = rms_norm().execute([xt, wt, 1e-5])
        got = out.float().cpu().numpy().astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
    assert len(compiles) == 1


# ---- canonical forms (kfuse.engine.canonical_store) ----


@pytest.fixture
def canonicalizations(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The canonical forms built (not read back from the store)."""
    from kfuse.ir import canonicalize

    made: list[Any] = []
    real = canonicalize.Canonicalizer.run

    def counted(self: Any) -> Any:
        made.append(self.original)
        return real(self)

    monkeypatch.setattr(canonicalize.Canonicalizer, "run", counted)
    return made


def halved_square() -> FusionDefinition:
    """pow(x, 2) / 2 + 1: two rules rewrite it (x * x, and * 0.5), so its canonical form is
    a fusion of its own, with a constant of the definition's (1.0) and one a rule made."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1])
        y = fd.ops.div(fd.ops.pow(x, 2.0), 2.0)
        fd.add_output(fd.ops.add(y, 1.0))
    return fd


def test_a_new_definition_reads_its_canonical_form_back(
    store: Path, canonicalizations: list[Any]
) -> None:
    from kfuse.ir.printer import fusion_to_python

    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    first = halved_square()
    (out,) = first.execute([x])
    np.testing.assert_allclose(out, x * x / 2 + 1, rtol=1e-6)
    built = first._executor_cache.fusion
    assert built is not first.fusion, "no rule rewrote it: this test needs one that does"
    again = halved_square()
    (out,) = again.execute([x])
    np.testing.assert_allclose(out, x * x / 2 + 1, rtol=1e-6)
    assert len(canonicalizations) == 1, "the second definition canonicalized again"
    loaded = again._executor_cache.fusion
    assert fusion_to_python(loaded) == fusion_to_python(built)
    assert loaded.structure() == built.structure()
    # the definition's constants are shared, not copied, as canonicalization shares them
    constants = {
        id(v) for e in again.fusion.exprs for v in e.inputs if getattr(v, "is_constant", False)
    }
    used = [v for e in loaded.exprs for v in e.inputs if getattr(v, "is_constant", False)]
    assert any(id(v) in constants for v in used)


def test_a_definition_that_is_its_own_canonical_form_is_recorded_so(
    store: Path, canonicalizations: list[Any]
) -> None:
    check(rms_norm(), inputs())
    fd = rms_norm()
    check(fd, inputs())
    assert len(canonicalizations) == 1
    assert fd._executor_cache.fusion is fd.fusion


def test_a_canonical_form_that_is_not_the_definitions_is_removed_and_built_again(
    store: Path, canonicalizations: list[Any]
) -> None:
    """Another fusion's entry under this definition's key: checked against the definition,
    removed with a warning, the definition canonicalized, the results right."""
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    halved_square().execute([x])
    check(rms_norm(), inputs())
    folder = store.parent / "canonical"
    entries = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert len(entries) == 2
    square_entry, norm_entry = entries
    from kfuse.engine import canonical_store
    from kfuse.runtime import disk_cache

    blob = square_entry.read_bytes()
    payload = blob[blob.index(b"\n", len(b"KFUSE-CACHE-ENTRY 2\n")) + 1 :]
    norm_entry.write_bytes(disk_cache.pack(norm_entry.name, canonical_store._identity(), payload))
    with pytest.warns(RuntimeWarning, match="does not load back"):
        check(rms_norm(), inputs())
    assert len(canonicalizations) == 3


def test_a_fusion_without_inputs_keeps_its_canonical_form_and_program(
    store: Path, canonicalizations: list[Any], compiles: list[Any]
) -> None:
    """A factory's fusion (no input to find its definition's owner by): pow(iota, 2) + 1,
    whose canonical form (iota * iota + 1) is a fusion of its own."""

    def factory() -> FusionDefinition:
        with FusionDefinition() as fd:
            i = fd.ops.iota(6, dtype=DataType.Float)
            fd.add_output(fd.ops.add(fd.ops.pow(i, 2.0), 1.0))
        return fd

    for _ in range(2):
        fd = factory()
        (out,) = fd.execute([])
        np.testing.assert_array_equal(out, np.arange(6, dtype=np.float32) ** 2 + 1)
        assert fd._executor_cache.fusion is not fd.fusion
    assert len(canonicalizations) == 1 and len(compiles) == 1


def test_a_new_row_count_reuses_the_compiled_kernel(store: Path, compiles: list[Any]) -> None:
    """Issue 60: a new shape that a compiled kernel covers compiles nothing again. The rows
    of a norm are the grid's, not the kernel's: a new row count is a new signature (a new
    program, from the heuristics again) whose kernel source is the first one's, so the host
    compiler (NVRTC on a GPU) runs once."""
    from kfuse.runtime.emulator import build

    fd = rms_norm()
    check(fd, inputs(rows=40, cols=1024))
    first = fd.last_program().launches[0].source
    before = build.compiler_invocations()
    for rows in (64, 100, 256):
        check(fd, inputs(rows=rows, cols=1024))
        assert fd.last_program().launches[0].source == first
    assert build.compiler_invocations() == before
    assert len(compiles) == 4  # a program per signature; the kernel compiled once
