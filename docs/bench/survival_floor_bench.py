"""``specd bench engine`` with Scheme B run twice: at the policy's survival floor and at another.

``Policy.survival_floor`` keeps the scheduler from verifying a draft whose prefix survival
S(r, i) is below it, whatever the step-cost table says the token costs. Where the table is
flat (a lone row, or a few rows, whose forward is bound by reading the weights) a draft below
the floor costs nothing to verify and still adds its survival to the round's expected tokens,
so the floor alone decides what Scheme B cuts there. This runs the benchmark unchanged except
that the group named ``semi-ar-scheduled:k3`` (Scheme B at K=3, so name it beside ``--k 3``)
verifies with ``survival_floor`` = $SURVIVAL_FLOOR (default 0.05, the default before
2026-12-06; the policy's default is now 0): the two Scheme B rows of the table differ only in
the floor, measured side by side in one run. Run files made before 2026-12-06 ran that group
at floor 0 beside the then default 0.05 (their ``note`` says so).

    python docs/bench/survival_floor_bench.py bench engine --k 3 --max-tokens 128 --passes 3 \\
        --groups semi-ar-fixed,semi-ar-scheduled,semi-ar-scheduled:k3 --concurrency 4 ...
"""

from __future__ import annotations

import os
import sys

import specd.worker.bench.groups as groups
from specd.api.policy import Policy

OTHER_FLOOR = "semi-ar-scheduled:k3"
FLOOR = float(os.environ.get("SURVIVAL_FLOOR", "0.05"))
_policy = groups.Group.policy


def policy(self: groups.Group, k: int) -> Policy:
    p = _policy(self, k)
    if self.name == OTHER_FLOOR:
        p = p.model_copy(update={"survival_floor": FLOOR})
        print(f"{self.name}: survival_floor {FLOOR}", file=sys.stderr)
    return p


groups.Group.policy = policy  # type: ignore[method-assign]

if __name__ == "__main__":
    from specd.cli import main

    sys.exit(main())
