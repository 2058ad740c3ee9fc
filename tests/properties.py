"""Hypothesis profiles for the property tests, and `examples(share)` for a property that costs more a case.

Profiles (`--hypothesis-profile NAME`, or `HYPOTHESIS_PROFILE=NAME`):
- `ci` (the default): 200 examples a property, the whole set of properties under a minute on 2 cores;
- `long`: 20,000 examples a property (`examples(share)` included), what `tools/property_tests.py` runs;
- `dev`: 30 examples, for the edit-and-rerun loop.

No deadline in any profile: a case's time depends on the machine's load, never on its correctness.
A failing example is shrunk to a minimal one and saved in `.hypothesis/` (ignored by git), so the
next run tries it first; each failure found becomes a regression test with the example written out.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["examples"]

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
settings.register_profile("ci", max_examples=200, **_COMMON)
settings.register_profile("long", max_examples=20_000, **_COMMON)
settings.register_profile("dev", max_examples=30, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def examples(share: float) -> settings:
    """Settings running `share` of the loaded profile's examples (at least 10) for a property whose case starts a
    backend or builds an index, so that the CI profile stays under a minute; the long profile runs them all."""
    if settings.get_current_profile_name() == "long":
        return settings()
    return settings(max_examples=max(10, int(settings.default.max_examples * share)))
