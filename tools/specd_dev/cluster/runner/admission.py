"""How many pod processes this machine takes at once (pure).

Each pod reserves memory as the scheduler would count it: its container's memory request,
else its limit, else what its entry point is measured to use (a ``specd serve`` worker on
the embedded model with the operator's default engine settings: :data:`WORKER_RSS_BYTES`;
the operator or dashboard: :data:`LIGHT_RSS_BYTES`). Pods start while their reservations fit
in 80 % of the memory available when the runner started, so the machine never swaps; an
optional count cap (``specd cluster up --max-processes N``) applies as well. A pod that does
not fit waits (not Ready, reason ``ProcessCapReached``, a Warning Event with the numbers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specd_dev.cluster.runner.rules import entry_point, parse_quantity

# The larger peak RSS measured for a `specd serve` worker with the operator's default engine
# settings (16 slots x 2048 tokens): plain decoding 4.46 GiB, semi-ar 3.04 GiB
# (docs/bench/RESULTS.md, "Pod runner").
WORKER_RSS_BYTES = int(4.5 * 2**30)
LIGHT_RSS_BYTES = 512 * 2**20
BUDGET_SHARE = 0.8
GiB = 2**30


@dataclass(frozen=True)
class Capacity:
    budget_bytes: int
    max_processes: int | None = None

    @classmethod
    def from_available(cls, available: int, max_processes: int | None = None) -> Capacity:
        return cls(int(BUDGET_SHARE * available), max_processes)

    def describe(self, reserved: int) -> str:
        text = f"memory budget {self.budget_bytes / GiB:.1f} GiB, {reserved / GiB:.1f} reserved"
        if self.max_processes:
            text += f"; at most {self.max_processes} processes (--max-processes)"
        return text


def reservation(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    for kind in ("requests", "limits"):
        value = (resources.get(kind) or {}).get("memory")
        if value is not None:
            return int(parse_quantity(value))
    return WORKER_RSS_BYTES if entry_point(container) == "serve" else LIGHT_RSS_BYTES


def refusal(capacity: Capacity, admitted: Mapping[str, int], need: int) -> str | None:
    """None when a pod reserving ``need`` bytes may start beside ``admitted`` (uid -> bytes);
    otherwise why not, in words for the Event."""
    if capacity.max_processes is not None and len(admitted) >= capacity.max_processes:
        return (f"the pod runner runs at most {capacity.max_processes} processes "
                f"(--max-processes) and {len(admitted)} are running")
    used = sum(admitted.values())
    if used + need > capacity.budget_bytes:
        return (f"the pod needs {need / GiB:.1f} GiB of memory and "
                f"{(capacity.budget_bytes - used) / GiB:.1f} of the runner's "
                f"{capacity.budget_bytes / GiB:.1f} GiB budget are free")
    return None
