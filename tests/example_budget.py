"""How many Hypothesis examples a property test draws under the active profile.

Tests pass their `ci` budget (small where each example compiles and runs a kernel); under
the `campaign` profile (KFUSE_HYPOTHESIS_PROFILE=campaign) every test draws the campaign's
count instead, so the long runs really are long.
"""

from __future__ import annotations

import os


def examples(ci: int) -> int:
    """`ci` under the ci profile, the campaign's max_examples under the campaign profile."""
    if os.environ.get("KFUSE_HYPOTHESIS_PROFILE", "ci") == "campaign":
        from hypothesis import settings

        return settings.get_profile("campaign").max_examples
    return ci
