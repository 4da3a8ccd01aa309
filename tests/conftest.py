"""Shared pytest configuration: Hypothesis profiles, the `gpu` and `extended` markers.

Profiles: `ci` (default; fast) and `campaign` (long runs). Select with the environment
variable KFUSE_HYPOTHESIS_PROFILE=campaign or pytest's --hypothesis-profile=campaign.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

import shared_prebuilt

# `ci` is derandomized: the same examples every run, so a submission's CI result does not
# depend on luck; `campaign` explores new examples each run.
settings.register_profile(
    "ci",
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "campaign",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("KFUSE_HYPOTHESIS_PROFILE", "ci"))

# The program store (kfuse.engine.program_store) keys a stored program by the package's code
# and switches, not by the heuristics a test patches in the running process: off for the
# suite, so that every test compiles what it sets up, but for tests/test_program_store.py,
# which turns it on with a cache of its own. KFUSE_PROGRAM_CACHE=1 runs the suite with it on.
os.environ.setdefault("KFUSE_PROGRAM_CACHE", "0")


def _gpu_skip_reason() -> str | None:
    """None when a GPU is usable, else why GPU tests are skipped: the one wording
    gpu_support.requires_gpu gives too (checked once, lazily)."""
    try:
        from kfuse import _C  # noqa: F401 - only whether the extension is built
    except ImportError as e:
        return f"kfuse._C is not built ({e})"
    from gpu_support import gpu_status

    count, why = gpu_status()
    return None if count > 0 else f"needs an NVIDIA GPU ({why})"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (skipped when none)")


@pytest.fixture(autouse=True)
def _release_cached_gpu_memory(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each GPU test, hand the blocks torch's and CuPy's caching allocators keep back to
    the driver: the GPU tests run in several processes on one GPU (tools/device_check.sh), and
    the blocks one worker's earlier tests left cached ran another worker's float64 reference
    of a [200, 2^20] layer norm out of an H100's memory. Neither library is imported for it."""
    yield
    if request.node.get_closest_marker("gpu") is None:
        return
    from kfuse.testing.gpu_memory import release_cached_gpu_memory

    release_cached_gpu_memory()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _leave_out_extended(config, items)
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    reason = _gpu_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


def _leave_out_extended(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the `extended` tests unless the -m expression names them: the README's
    command stays a few minutes on two cores, and CI runs them in a step of their own
    (`-m extended`, .ci/run)."""
    if "extended" in (config.getoption("markexpr", "") or ""):
        return
    extended = [item for item in items if item.get_closest_marker("extended")]
    if extended:
        config.hook.pytest_deselected(items=extended)
        items[:] = [item for item in items if not item.get_closest_marker("extended")]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per reason tests were skipped, with how many (pytest's -rs lists every
    location: on a machine without a GPU that is a screenful of the same reason)."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        text = text.removeprefix("Skipped: ")
        reasons[text] = reasons.get(text, 0) + 1
    if not reasons:
        return
    terminalreporter.write_sep("-", "skipped, by reason")
    for text, count in sorted(reasons.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{count:5d}  {text}")


@pytest.fixture(scope="module")
def module_private_cache(tmp_path_factory: pytest.TempPathFactory):
    """KFUSE_CACHE_DIR set to a fresh directory for one test module: its kernels compile into
    a disk cache of their own, which other modules' entries neither satisfy nor corrupt; it
    starts with a copy of the session cache's prebuilt folder (shared_prebuilt).
    Modules take it with `pytestmark = pytest.mark.usefixtures("module_private_cache")`."""
    cache = tmp_path_factory.mktemp("kfuse-cache")
    shared_prebuilt.seed(cache)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KFUSE_CACHE_DIR", str(cache))
        yield
