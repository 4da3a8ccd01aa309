"""`import kfuse` touches no CUDA library; a missing or too-old driver gives a clear CudaError
on first use, not at import; `python -m kfuse info` works without a GPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CUDA_LIBRARIES = ("libcuda", "libnvrtc", "libcupti")

# A driver whose cuInit says the driver is too old for this CUDA (the real driver's answer
# when a program needs a newer CUDA than it supports).
FAKE_OLD_DRIVER = r"""
extern "C" int cuInit(unsigned int) { return 35; }
extern "C" int cuDriverGetVersion(int *v) { *v = 11040; return 0; }
extern "C" int cuGetErrorName(int code, const char **s) {
    *s = code == 35 ? "CUDA_ERROR_INSUFFICIENT_DRIVER" : "CUDA_ERROR_UNKNOWN";
    return 0;
}
extern "C" int cuGetErrorString(int code, const char **s) {
    *s = "CUDA driver version is insufficient for CUDA runtime version";
    return 0;
}
"""

# A driver that initializes but lacks entry points kfuse needs (an old libcuda).
FAKE_DRIVER_MISSING_SYMBOLS = r"""
extern "C" int cuInit(unsigned int) { return 0; }
extern "C" int cuDriverGetVersion(int *v) { *v = 12020; return 0; }
"""


def run_python(code: str, env_update: dict[str, str], cwd: Path) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object, which is returned."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KFUSE_")}
    env.update(env_update)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def build_fake_driver(source: str, directory: Path) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to build a fake libcuda")
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / "fake_cuda.cpp"
    src.write_text(source)
    lib = directory / "libcuda.so.1"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


PROBE_FIRST_DEVICE_CALL = """
    import json
    import kfuse
    maps = open("/proc/self/maps").read()
    loaded_at_import = [n for n in ("libcuda", "libnvrtc", "libcupti") if n in maps]
    try:
        kfuse._C.device_count()
        error = None
    except kfuse.CudaError as exc:
        error = {"code": exc.code, "name": exc.name, "text": exc.text, "message": str(exc),
                 "is_kfuse_error": isinstance(exc, kfuse.KfuseError)}
    print(json.dumps({"loaded_at_import": loaded_at_import, "error": error}))
"""


def test_import_loads_no_cuda_library(tmp_path: Path) -> None:
    result = run_python(
        """
        import json
        import kfuse
        kfuse.LaunchParams(block_x=128)
        kfuse.CompileParams(index_type="int32")
        kfuse.PointwiseParams().to_dict()
        kfuse.KernelExecutor()
        maps = open("/proc/self/maps").read()
        print(json.dumps({n: n in maps for n in ("libcuda", "libnvrtc", "libcupti")}))
        """,
        {},
        tmp_path,
    )
    assert result == {name: False for name in CUDA_LIBRARIES}


def test_the_submodules_the_readme_names_are_attributes_of_kfuse(tmp_path: Path) -> None:
    """The README's `kfuse.reference.evaluate(fusion, inputs)` and `kfuse.testing` work after
    a plain `import kfuse`, which still imports neither (nor any CUDA library) until they are
    first used."""
    result = run_python(
        """
        import json
        import sys
        import kfuse
        imported_by_import = [m for m in ("kfuse.reference", "kfuse.testing") if m in sys.modules]
        import numpy as np
        with kfuse.FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1], dtype=kfuse.DataType.Float)
            fd.add_output(fd.ops.mul(x, 2.0))
        a = np.arange(3, dtype=np.float32)
        (out,) = kfuse.reference.evaluate(fd.fusion, [a])
        kfuse.testing.assert_close(out, a * 2, kfuse.DataType.Float)
        try:
            kfuse.no_such_module
            missing = None
        except AttributeError as exc:
            missing = str(exc)
        maps = open("/proc/self/maps").read()
        print(json.dumps({
            "imported_by_import": imported_by_import,
            "evaluated": out.tolist(),
            "missing": missing,
            "listed": [n for n in ("reference", "testing") if n in dir(kfuse)],
            "cuda": [n for n in ("libcuda", "libnvrtc", "libcupti") if n in maps],
        }))
        """,
        {},
        tmp_path,
    )
    assert result["imported_by_import"] == []
    assert result["evaluated"] == [0.0, 2.0, 4.0]
    assert result["missing"] == "module 'kfuse' has no attribute 'no_such_module'"
    assert result["listed"] == ["reference", "testing"]
    assert result["cuda"] == []


def test_too_old_driver_raises_cuda_error_on_first_use(tmp_path: Path) -> None:
    lib = build_fake_driver(FAKE_OLD_DRIVER, tmp_path / "old")
    result = run_python(PROBE_FIRST_DEVICE_CALL, {"KFUSE_CUDA_LIBRARY": str(lib)}, tmp_path)
    assert result["loaded_at_import"] == []
    error = result["error"]
    assert error is not None and error["is_kfuse_error"]
    assert error["code"] == 35
    assert error["name"] == "CUDA_ERROR_INSUFFICIENT_DRIVER"
    assert "cuInit" in error["message"]
    assert "too old" in error["message"] and "Update the NVIDIA driver" in error["message"]


def test_too_old_driver_found_through_ld_library_path(tmp_path: Path) -> None:
    lib = build_fake_driver(FAKE_OLD_DRIVER, tmp_path / "old")
    path = os.pathsep.join(filter(None, [str(lib.parent), os.environ.get("LD_LIBRARY_PATH")]))
    result = run_python(PROBE_FIRST_DEVICE_CALL, {"LD_LIBRARY_PATH": path}, tmp_path)
    assert result["error"]["name"] == "CUDA_ERROR_INSUFFICIENT_DRIVER"


def test_driver_lacking_entry_points_is_reported_as_too_old(tmp_path: Path) -> None:
    lib = build_fake_driver(FAKE_DRIVER_MISSING_SYMBOLS, tmp_path / "partial")
    result = run_python(PROBE_FIRST_DEVICE_CALL, {"KFUSE_CUDA_LIBRARY": str(lib)}, tmp_path)
    message = result["error"]["message"]
    assert "too old" in message and "cuDeviceGetCount" in message and "12.2" in message


def test_missing_driver_raises_clear_cuda_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "libcuda.so.1"
    result = run_python(PROBE_FIRST_DEVICE_CALL, {"KFUSE_CUDA_LIBRARY": str(missing)}, tmp_path)
    error = result["error"]
    assert error["name"] == "CUDA_ERROR_INSUFFICIENT_DRIVER"
    assert str(missing) in error["message"]
    assert "KFUSE_CUDA_LIBRARY" in error["message"]


def test_info_exits_zero_without_gpu(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "libcuda.so.1"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KFUSE_")}
    env["KFUSE_CUDA_LIBRARY"] = str(missing)
    proc = subprocess.run(
        [sys.executable, "-m", "kfuse", "info"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "kfuse 0.1.0" in proc.stdout
    assert "no GPU" in proc.stdout
    assert "NVRTC" in proc.stdout and "CUPTI" in proc.stdout


def test_errors_form_one_hierarchy() -> None:
    import kfuse
    from kfuse import errors

    assert errors.CudaError is kfuse._C.CudaError
    assert errors.CompileError is kfuse._C.CompileError
    for name in errors.__all__:
        cls = getattr(errors, name)
        if issubclass(cls, Warning):  # kfuse's warnings have their own root
            assert issubclass(cls, errors.KfuseWarning) and issubclass(cls, UserWarning)
        else:
            assert issubclass(cls, errors.KfuseError)
