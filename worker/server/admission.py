"""Bounded admission: at most ``capacity`` requests in the server at once, the rest get 429.

The engine runs a batch of requests and queues the others; this bound keeps that queue (and
the memory its prompts hold) finite. A refused client is told when to retry: roughly how long
one request currently takes, since that is when a slot frees up.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


def retry_after_seconds(recent_latencies: list[float], default: float = 1.0,
                        ceiling: float = 60.0) -> int:
    """Whole seconds to wait: the median recent request latency, within [1, ceiling]."""
    if not recent_latencies:
        guess = default
    else:
        ordered = sorted(recent_latencies)
        guess = ordered[len(ordered) // 2]
    return int(min(ceiling, max(1.0, math.ceil(guess))))


@dataclass
class Admission:
    """Counts requests in flight; ``try_admit`` is False when full or draining.

    Used from the event loop only (no locks needed): FastAPI handlers run on one loop.
    """

    capacity: int
    in_flight: int = 0
    draining: bool = False
    _latencies: deque[float] = field(default_factory=lambda: deque(maxlen=64))

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError("admission capacity must be >= 1")

    def try_admit(self) -> bool:
        if self.draining or self.in_flight >= self.capacity:
            return False
        self.in_flight += 1
        return True

    def release(self, latency_s: float | None = None) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        if latency_s is not None:
            self._latencies.append(latency_s)

    def retry_after(self) -> int:
        return retry_after_seconds(list(self._latencies))
