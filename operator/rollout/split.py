"""Replicas per track at a canary weight (pure).

Argo Rollouts' basic canary (no traffic router): the traffic share follows the replica share,
so the canary gets round(replicas x weight / 100) replicas, at least one, and the stable
track the rest. Two choices of ours, both so that analysis always has both tracks to compare:
below 100 % the stable track keeps at least one replica, and a single-replica service runs
its canary beside the stable replica (a surge of one) rather than instead of it.
"""

from __future__ import annotations

import math


def round_half_up(value: float) -> int:
    return int(math.floor(value + 0.5))


def split_replicas(replicas: int, weight: int) -> tuple[int, int]:
    """(stable, canary) replicas for ``replicas`` in total at ``weight`` percent."""
    if not 0 <= weight <= 100:
        raise ValueError(f"weight must be in 0..100, not {weight}")
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, not {replicas}")
    if weight == 0 or replicas == 0:
        return replicas, 0
    if weight == 100:
        return 0, replicas
    if replicas == 1:
        return 1, 1
    canary = min(max(1, round_half_up(replicas * weight / 100)), replicas - 1)
    return replicas - canary, canary


def actual_weight(stable_ready: int, canary_ready: int) -> int:
    """The share of Ready replicas on the canary track (what traffic really sees), percent."""
    total = stable_ready + canary_ready
    return round_half_up(100 * canary_ready / total) if total else 0
