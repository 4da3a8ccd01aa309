"""Audit a built kfuse wheel: stable-ABI and manylinux tags, no link-time CUDA dependency.

    python wheels/check_wheel.py dist/kfuse-*.whl

Checks that the wheel is tagged ``cp310-abi3`` with a ``manylinux_*`` platform (file name and
WHEEL metadata: a bare ``linux_x86_64`` wheel is refused by package indexes; auditwheel
repair gives the tag), that it ships
exactly one ``kfuse/_C.abi3.so``, that the extension's DT_NEEDED entries (``readelf -d``) name
no CUDA library (libcuda, libnvrtc, libcupti, libcudart), and that the metadata requires
``nanobind-backend``. Exits non-zero with a list of problems otherwise.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

EXPECTED_TAG = "cp310-abi3"
FORBIDDEN_NEEDED = ("libcuda", "libnvrtc", "libcupti", "libcudart")


def needed_libraries(shared_object: Path) -> list[str]:
    """The DT_NEEDED entries of an ELF shared object, via readelf."""
    out = subprocess.run(
        ["readelf", "-d", str(shared_object)], check=True, capture_output=True, text=True
    ).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def check_wheel(wheel: Path) -> list[str]:
    """Problems found in ``wheel`` (empty when it passes)."""
    problems = []
    if f"-{EXPECTED_TAG}-" not in wheel.name:
        problems.append(f"file name {wheel.name} lacks the {EXPECTED_TAG} tag")
    if not re.search(rf"-{EXPECTED_TAG}-(manylinux[^-]*)\.whl$", wheel.name):
        problems.append(
            f"file name {wheel.name} has no manylinux platform tag (run auditwheel repair)"
        )
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        wheel_info = next((n for n in names if n.endswith(".dist-info/WHEEL")), None)
        metadata = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        if wheel_info is None or metadata is None:
            return problems + ["no WHEEL or METADATA file in the wheel"]
        tags = re.findall(r"^Tag: (.+)$", archive.read(wheel_info).decode(), re.M)
        if not tags or any(not t.startswith(f"{EXPECTED_TAG}-manylinux") for t in tags):
            problems.append(f"WHEEL tags {tags} are not all {EXPECTED_TAG}-manylinux*")
        requires = re.findall(r"^Requires-Dist: (.+)$", archive.read(metadata).decode(), re.M)
        if not any(r.startswith("nanobind-backend") for r in requires):
            problems.append(f"METADATA does not require nanobind-backend: {requires}")
        extensions = [n for n in names if re.fullmatch(r"kfuse/_C[^/]*\.so", n)]
        if extensions != ["kfuse/_C.abi3.so"]:
            problems.append(f"expected exactly kfuse/_C.abi3.so, found {extensions}")
        with tempfile.TemporaryDirectory() as tmp:
            for name in extensions:
                path = Path(archive.extract(name, tmp))
                needed = needed_libraries(path)
                bad = [lib for lib in needed if lib.startswith(FORBIDDEN_NEEDED)]
                if bad:
                    problems.append(f"{name} links CUDA libraries at load time: {bad}")
                print(f"{name}: NEEDED {needed}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Check every wheel given; print what was checked and any problems."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    args = parser.parse_args(argv)
    failed = False
    for wheel in args.wheels:
        problems = check_wheel(wheel)
        for problem in problems:
            print(f"{wheel.name}: {problem}", file=sys.stderr)
        print(f"{wheel.name}: {'FAILED' if problems else 'ok'}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
