#!/usr/bin/env bash
# Regenerate src/kfuse/_C.pyi (the C++ extension's type stubs) from the installed kfuse:
#   python3 -m pip install . && tools/gen_stubs.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd /tmp && python3 -m nanobind.stubgen -m kfuse._C -o "$ROOT/src/kfuse/_C.pyi"
