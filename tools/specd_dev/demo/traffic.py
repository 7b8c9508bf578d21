"""The demo's traffic: open-loop Poisson arrivals of the pilot's real prompts (English and
Chinese) through a Service URL, bounded and stoppable.

Two task groups, chat and code: on a 2-core machine a worker finishes well under one request
a second, and a canary's analysis per task group needs a few requests of each group on each
track in its window.

Open loop, as users arrive: a slow service gets a queue (and 429s past its bound), not
fewer requests. Every request is counted by outcome; per-group temperatures let a stage
make one group draft badly.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx

from specd.api.prompt_file import read_prompt_file
from specd.pilot.prompts import default_prompt_file
from specd.pilot.traces import poisson_times

GROUPS = ("chat", "code")


def prompts_by_group() -> dict[str, list[list[dict[str, str]]]]:
    """The pilot's default prompts (the engine benchmark's), as chat messages per group."""
    out: dict[str, list[list[dict[str, str]]]] = {g: [] for g in GROUPS}
    for row in read_prompt_file(default_prompt_file()):
        group = row.get("task_group", "other")
        if group in out:
            out[group].append(row.get("messages")
                              or [{"role": "user", "content": str(row["prompt"])}])
    return out


class OpenLoop:
    """Poisson arrivals at ``rate`` requests/s until stopped (a context manager)."""

    def __init__(self, url: str, rate: float = 0.4, max_tokens: int = 16, seed: int = 0,
                 workers: int = 16) -> None:
        self.url, self.rate, self.max_tokens = url, rate, max_tokens
        self.rng = random.Random(seed)
        self.prompts = prompts_by_group()
        self.temperatures: dict[str, float] = {}  # per group; greedy otherwise
        self.outcomes: Counter[str] = Counter()  # "ok", "429", "5xx", "error"
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.thread = threading.Thread(target=self._arrivals, daemon=True)
        self.http = httpx.Client(timeout=120)

    def _arrivals(self) -> None:
        start = time.monotonic()
        offset = 0.0
        while not self.stop.is_set():
            # a minute of arrivals at a time: the schedule stays seeded and bounded
            for t in poisson_times(self.rate, 60.0, self.rng):
                delay = start + offset + t - time.monotonic()
                if self.stop.wait(max(0.0, delay)):
                    return
                group = self.rng.choice(GROUPS)
                messages = self.rng.choice(self.prompts[group])
                self.pool.submit(self._send, group, messages)
            offset += 60.0

    def _send(self, group: str, messages: list[dict[str, str]]) -> None:
        try:
            response = self.http.post(
                f"{self.url}/v1/chat/completions", headers={"X-Specd-Task-Group": group},
                json={"model": "smollm2-135m", "max_tokens": self.max_tokens,
                      "temperature": self.temperatures.get(group, 0.0), "messages": messages})
            code = response.status_code
            outcome = "ok" if code == 200 else "429" if code == 429 else f"{code // 100}xx"
            detail = f"{code} {response.text[:160]}"
        except httpx.HTTPError as exc:
            outcome, detail = "error", f"{type(exc).__name__}: {exc}"
        with self.lock:
            self.outcomes[outcome] += 1
            if outcome != "ok":
                self.errors.append(detail)

    def counts(self) -> dict[str, int]:
        with self.lock:
            return dict(self.outcomes)

    def __enter__(self) -> OpenLoop:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.http.close()
