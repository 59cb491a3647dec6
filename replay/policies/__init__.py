"""Scheduling and retention policies behind one interface (:class:`replay.scheduler.Policy`).

``make(name, ...)`` builds one by name; ``NAMES`` lists them in the order of the
comparison table (the ablation ladder first, then the baselines, then the two
evaluation-only bounds).
"""

from __future__ import annotations

from replay.policies.registry import BOUNDS, NAMES, PolicySpec, make

__all__ = ["BOUNDS", "NAMES", "PolicySpec", "make"]
