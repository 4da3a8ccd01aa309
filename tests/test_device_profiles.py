"""DeviceDescription and the named device profiles (src/kfuse/runtime/device.py)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from types import SimpleNamespace

import pytest

from kfuse.runtime import device


def test_profiles_carry_published_figures() -> None:
    h100, h200, a100 = (device.get_profile(n) for n in ("h100", "h200", "a100"))
    assert (h100.arch, h200.arch, a100.arch) == ("sm_90", "sm_90", "sm_80")
    assert (h100.sm_count, h200.sm_count, a100.sm_count) == (132, 132, 108)
    assert h100.shared_mem_per_sm == 228 * 1024 and h100.shared_mem_per_block_optin == 227 * 1024
    assert a100.shared_mem_per_sm == 164 * 1024 and a100.shared_mem_per_block_optin == 163 * 1024
    assert (h100.l2_cache_bytes, h200.l2_cache_bytes, a100.l2_cache_bytes) == (
        50 * 2**20,
        60 * 2**20,
        40 * 2**20,
    )
    assert h200.total_memory > 140e9 and h100.total_memory > 80e9 and a100.total_memory > 80e9
    for p in (h100, h200, a100):
        assert p.regs_per_sm == 65536 and p.max_threads_per_sm == 2048 and p.max_blocks_per_sm == 32
        assert p.warp_size == 32 and p.max_threads_per_block == 1024
        assert p.shared_mem_per_block == 48 * 1024
        assert p.shared_mem_per_block_optin < p.shared_mem_per_sm


def test_peak_bandwidth_matches_datasheets() -> None:
    assert device.get_profile("h100").peak_bandwidth_gbs == pytest.approx(3350, rel=0.01)
    assert device.get_profile("h200").peak_bandwidth_gbs == pytest.approx(4800, rel=0.01)
    assert device.get_profile("a100").peak_bandwidth_gbs == pytest.approx(2039, rel=0.01)


def test_get_profile_is_case_insensitive_and_names_the_choices() -> None:
    assert device.get_profile(" H100 ") is device.PROFILES["h100"]
    with pytest.raises(ValueError, match="a100, h100, h200"):
        device.get_profile("v100")
    with pytest.raises(ValueError):
        device.get_profile(None)  # type: ignore[arg-type]


def test_descriptions_are_frozen_and_hashable() -> None:
    p = device.get_profile("h200")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.sm_count = 1  # type: ignore[misc]
    assert {p: 1}[device.get_profile("h200")] == 1
    assert dataclasses.replace(p, sm_count=66).sm_count == 66


def test_from_properties_reads_attribute_names() -> None:
    h100 = device.get_profile("h100")
    fields = {f.name: getattr(h100, f.name) for f in dataclasses.fields(h100)}
    props = SimpleNamespace(**fields, peak_bandwidth_gbs=1.0)  # extra attributes are ignored
    assert device.from_properties(props) == h100
    del fields["regs_per_sm"], fields["l2_cache_bytes"]
    with pytest.raises(ValueError, match="regs_per_sm, l2_cache_bytes"):
        device.from_properties(SimpleNamespace(**fields))


def test_import_does_not_touch_cuda() -> None:
    # Whatever `import kfuse` itself loads, importing kfuse.runtime.device must add no CUDA binding,
    # framework or loader on top.
    code = (
        "import sys, kfuse\n"
        "before = set(sys.modules)\n"
        "import kfuse.runtime.device\n"
        "added = [n for n in set(sys.modules) - before if n.split('.')[0] in\n"
        "         ('cuda', 'torch', 'cupy', 'ctypes') or n.startswith('kfuse._C')]\n"
        "assert not added, added\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
