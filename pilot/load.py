"""The open-loop load generator: every arrival is sent at its scheduled time, whatever the
server is doing (a closed loop would slow down with the server and hide its queueing).

Each request is a streamed chat completion (greedy, ``stream_options.include_usage``, the
task group in ``X-Specd-Task-Group``). Timed per request from the moment it is sent: time to
the first non-empty content (TTFT), end to end, time per output token after the first,
and the server's ``usage`` (completion tokens, speculative rounds). Outcomes: ``ok``,
``rejected`` (429), ``timeout`` (the SLO's ``timeout_s``), ``error`` (any other status, a
refused or broken connection, an error event in the stream): every request sent is in the
results, so a server that dies mid-run shows up as failed requests, never as fewer requests.
While the schedule runs, ``/metrics`` is scraped every window (plus once before and once
after) for the round accounting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from specd.pilot.config import SLO
from specd.pilot.prompts import Prompt
from specd.pilot.traces import Arrival

TASK_GROUP_HEADER = "X-Specd-Task-Group"


@dataclass
class RequestResult:
    index: int
    task_group: str
    prompt: int
    lang: str
    max_tokens: int
    warmup: bool
    scheduled_s: float  # arrival time in the trace
    lag_s: float = 0.0  # how late the generator sent it (should stay near 0)
    outcome: str = "error"  # ok | rejected | timeout | error
    status: int | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    tokens: int = 0
    chunks: int = 0
    finish_reason: str | None = None
    text: str = ""
    error: str = ""
    speculative: dict[str, Any] = field(default_factory=dict)
    done_s: float | None = None  # completion time on the trace clock

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.e2e_s is None or self.tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.tokens - 1)

    def meets(self, slo: SLO) -> bool:
        if self.outcome != "ok" or self.ttft_s is None or self.e2e_s is None:
            return False
        tpot = self.tpot_s
        return (self.ttft_s <= slo.ttft_s and self.e2e_s <= slo.e2e_s
                and (tpot is None or tpot <= slo.tpot_s))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["tpot_s"] = self.tpot_s
        return out


def request_body(model: str, prompt: Prompt, max_tokens: int, stream: bool = True,
                 **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": prompt.messages, "max_tokens": max_tokens,
                            "temperature": 0.0, "stream": stream,
                            "metadata": {"task_group": prompt.task_group}}
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


async def stream_chat(client: httpx.AsyncClient, base_url: str, body: dict[str, Any],
                      result: RequestResult, start: float, stop_after_chunks: int | None = None
                      ) -> RequestResult:
    """Send one streamed chat completion and fill ``result`` (times from ``start``)."""
    headers = {TASK_GROUP_HEADER: result.task_group}
    parts: list[str] = []
    try:
        async with client.stream("POST", f"{base_url}/v1/chat/completions", json=body,
                                 headers=headers) as response:
            result.status = response.status_code
            if response.status_code != 200:
                raw = await response.aread()
                result.outcome = "rejected" if response.status_code == 429 else "error"
                result.error = raw.decode("utf-8", "replace")[:300]
                return result
            finished = False
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    finished = True
                    break
                event = json.loads(data)
                if "error" in event:
                    result.outcome, result.error = "error", str(event["error"])[:300]
                    return result
                for choice in event.get("choices") or []:
                    text = (choice.get("delta") or {}).get("content") or ""
                    if text:
                        if result.ttft_s is None:
                            result.ttft_s = time.perf_counter() - start
                        parts.append(text)
                        result.chunks += 1
                    if choice.get("finish_reason"):
                        result.finish_reason = choice["finish_reason"]
                usage = event.get("usage")
                if usage:
                    result.tokens = int(usage.get("completion_tokens") or 0)
                    result.speculative = usage.get("speculative") or {}
                if stop_after_chunks is not None and result.chunks >= stop_after_chunks:
                    result.outcome = "cancelled"
                    result.text = "".join(parts)
                    return result  # leaving the block closes the connection mid-stream
            if not finished:
                result.outcome, result.error = "error", "stream ended without [DONE]"
                return result
    except httpx.TimeoutException as exc:
        result.outcome, result.error = "timeout", f"{type(exc).__name__}"
        return result
    except (httpx.HTTPError, json.JSONDecodeError, OSError) as exc:
        result.outcome, result.error = "error", f"{type(exc).__name__}: {exc}"[:300]
        return result
    result.e2e_s = time.perf_counter() - start
    result.text = "".join(parts)
    if not result.tokens:
        result.tokens = result.chunks
    result.outcome = "ok"
    return result


@dataclass
class Scrape:
    t: float  # seconds on the trace clock
    text: str | None  # None: the scrape failed (the server is gone)
    error: str = ""


async def scrape(client: httpx.AsyncClient, url: str, t: float) -> Scrape:
    try:
        r = await client.get(f"{url}/metrics", timeout=5.0)
        r.raise_for_status()
        return Scrape(t, r.text)
    except (httpx.HTTPError, OSError) as exc:
        return Scrape(t, None, f"{type(exc).__name__}")


@dataclass
class RunOutput:
    results: list[RequestResult]
    scrapes: list[Scrape]
    wall_s: float


async def run_schedule(base_url: str, model: str, arrivals: list[Arrival],
                       prompts: dict[str, list[Prompt]], slo: SLO, window_s: float = 10.0
                       ) -> RunOutput:
    """Send every arrival at its time (open loop), scrape ``/metrics`` every window."""
    limits = httpx.Limits(max_connections=4096, max_keepalive_connections=64)
    timeout = httpx.Timeout(slo.timeout_s, connect=min(10.0, slo.timeout_s))
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        scrapes = [await scrape(client, base_url, 0.0)]
        t0 = time.perf_counter()

        async def scraper() -> None:
            k = 1
            while True:
                await asyncio.sleep(max(0.0, t0 + k * window_s - time.perf_counter()))
                scrapes.append(await scrape(client, base_url, time.perf_counter() - t0))
                k += 1

        async def one(i: int, a: Arrival) -> RequestResult:
            p = prompts[a.task_group][a.prompt]
            res = RequestResult(i, a.task_group, a.prompt, p.lang, a.max_tokens, a.warmup, a.t)
            await asyncio.sleep(max(0.0, t0 + a.t - time.perf_counter()))
            start = time.perf_counter()
            res.lag_s = start - t0 - a.t
            body = request_body(model, p, a.max_tokens)
            try:
                await asyncio.wait_for(stream_chat(client, base_url, body, res, start),
                                       timeout=slo.timeout_s)
            except TimeoutError:
                res.outcome, res.error = "timeout", "timeout_s"
            res.done_s = time.perf_counter() - t0
            return res

        task = asyncio.ensure_future(scraper())
        try:
            results = list(await asyncio.gather(*(one(i, a) for i, a in enumerate(arrivals))))
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        wall = time.perf_counter() - t0
        await asyncio.sleep(min(0.3, window_s))  # let the last round's metrics land
        scrapes.append(await scrape(client, base_url, time.perf_counter() - t0))
    return RunOutput(results, scrapes, wall)
