#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with what a device call carries and the GPU machine lacks: the
# wheels of nanobind and nanobind-backend (cp312) for building kfuse there, of Lightning
# Thunder 0.2.6 and the pure-Python or cp312 packages it needs beyond the machine's image
# (.whl/thunder/, for the Thunder GPU tests and tools/device_verify.sh's part "thunder"), and
# the repro scripts of ../shared/repros/*/ (.whl/repros/, for the part "repros"). A fresh
# checkout has none of them; run this once, on a machine with a package index:
#
#   tools/fetch_device_wheels.sh        then name ".whl" in the device call's carry
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
mkdir -p .whl/thunder .whl/repros
# The GPU machine runs CPython 3.12 on x86-64 (manylinux).
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
    manylinux1_x86_64; do
    platforms+=(--platform "$tag")
done
fetch() {  # fetch DIR NAME==VERSION...
    local dir="$1"
    shift
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${platforms[@]}" -d "$dir" "$@"
}
fetch .whl nanobind==3.1.0 nanobind-backend==1.0.0
# Thunder's requirements that the machine's image lacks (torch, numpy, networkx, opt_einsum,
# mpmath and lightning-utilities it has).
fetch .whl/thunder lightning-thunder==0.2.6 looseversion==1.3.0 optree dill
if compgen -G "../shared/repros/*/*.py" > /dev/null; then
    cp ../shared/repros/*/* .whl/repros/
fi
ls -R .whl
