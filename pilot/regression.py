"""Business regression, before any load: greedy consistency, stop strings, streaming,
cancellation mid-stream. (The traces add a second greedy check: every request that
finished on two groups is compared text for text in the report.)

- greedy: the first prompts of each task group (ChatML text) through
  ``POST /specd/v1/probe`` on G0 and on G1 (and G2), compared token by token with the
  operator's own judge (``specd.operator.analysis.probes.compare``): identical, a near-tie
  (each side's token is the other's runner-up with both logit gaps under
  ``near_tie_gap``), or a real difference. A server without the probe route is compared
  on greedy chat text alone (no near-tie tracing then).
- stop: G0's greedy output gives a stop string from its middle; every group must end right
  before it with ``finish_reason: stop``.
- streaming: the streamed text equals the unstreamed text, the stream ends with
  ``[DONE]`` and its usage counts the same tokens.
- cancellation: a stream closed after a few chunks must be counted ``cancelled`` by the
  server, free its slot (``specd_running_batch_size`` back to 0) and leave the server
  answering the next request.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from specd.pilot import promtext
from specd.pilot.config import Pilot
from specd.pilot.load import RequestResult, request_body, stream_chat
from specd.pilot.prompts import Prompt
from specd.pilot.servers import GroupServer


@dataclass
class Check:
    check: str
    group: str
    ok: bool
    detail: str = ""
    task_group: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def regression_prompts(pilot: Pilot, prompts: dict[str, list[Prompt]]) -> list[Prompt]:
    n = pilot.regression.prompts_per_task_group
    return [p for group in prompts.values() for p in group[:n]]


async def _probe(client: httpx.AsyncClient, server: GroupServer, texts: list[str],
                 max_tokens: int) -> list[dict[str, Any]] | None:
    out: list[dict[str, Any]] = []
    for i in range(0, len(texts), 16):
        r = await client.post(f"{server.url}/specd/v1/probe",
                              json={"prompts": texts[i:i + 16], "max_tokens": max_tokens})
        if r.status_code in (404, 405, 501):
            return None
        r.raise_for_status()
        out.extend(r.json()["results"])
    return out


async def _chat(client: httpx.AsyncClient, server: GroupServer, prompt: Prompt, max_tokens: int,
                **extra: Any) -> dict[str, Any]:
    r = await client.post(f"{server.url}/v1/chat/completions",
                          json=request_body(server.model, prompt, max_tokens, stream=False,
                                            **extra))
    r.raise_for_status()
    return r.json()


async def greedy_checks(client: httpx.AsyncClient, servers: dict[str, GroupServer],
                        prompts: list[Prompt], pilot: Pilot) -> list[Check]:
    from specd.operator.analysis.probes import ProbeAnswer, compare

    reg = pilot.regression
    texts = [p.chatml() for p in prompts]
    answers = {g: await _probe(client, s, texts, reg.max_tokens) for g, s in servers.items()}
    checks = []
    for g in ("G1", "G2"):
        base, other = answers["G0"], answers[g]
        if base is not None and other is not None:
            for i, (a, b) in enumerate(zip(base, other, strict=True)):
                c = compare(i, ProbeAnswer.from_json(a), ProbeAnswer.from_json(b),
                            reg.near_tie_gap)
                checks.append(Check("greedy", g, c.outcome in ("identical", "near-tie"),
                                    f"{c.outcome}{': ' + c.detail if c.detail else ''}",
                                    prompts[i].task_group))
        else:  # not a specd worker: text only
            for p in prompts:
                a = await _chat(client, servers["G0"], p, reg.max_tokens)
                b = await _chat(client, servers[g], p, reg.max_tokens)
                ta = a["choices"][0]["message"]["content"]
                tb = b["choices"][0]["message"]["content"]
                checks.append(Check("greedy", g, ta == tb, "identical text" if ta == tb else
                                    "text differs (no probe route: near-ties not traced)",
                                    p.task_group))
    return checks


def _stop_string(text: str) -> str | None:
    words = text.split()
    for w in words[len(words) // 3:]:
        w = w.strip(".,;:!?\"'()")
        if len(w) >= 3 and text.find(w) > 0:
            return w
    mid = len(text) // 2
    return text[mid:mid + 2] if len(text) >= 8 else None


async def stop_checks(client: httpx.AsyncClient, servers: dict[str, GroupServer],
                      prompts: list[Prompt], pilot: Pilot) -> list[Check]:
    checks = []
    reg = pilot.regression
    for p in prompts:
        base = (await _chat(client, servers["G0"], p, reg.max_tokens))["choices"][0]
        stop = _stop_string(base["message"]["content"])
        if stop is None:
            continue
        expected = base["message"]["content"][:base["message"]["content"].find(stop)]
        for g, s in servers.items():
            got = (await _chat(client, s, p, reg.max_tokens, stop=[stop]))["choices"][0]
            text = got["message"]["content"]
            ok = text == expected and got["finish_reason"] == "stop"
            checks.append(Check("stop", g, ok, f"stop {stop!r}: " + (
                "ends right before it" if ok else
                f"got {text[-40:]!r} ({got['finish_reason']}), expected ...{expected[-40:]!r}"),
                p.task_group))
    return checks


async def stream_checks(client: httpx.AsyncClient, servers: dict[str, GroupServer],
                        prompts: list[Prompt], pilot: Pilot) -> list[Check]:
    checks = []
    reg = pilot.regression
    for p in prompts:
        for g, s in servers.items():
            whole = await _chat(client, s, p, reg.max_tokens)
            res = RequestResult(0, p.task_group, 0, p.lang, reg.max_tokens, False, 0.0)
            await stream_chat(client, s.url, request_body(s.model, p, reg.max_tokens), res,
                              time.perf_counter())
            text = whole["choices"][0]["message"]["content"]
            tokens = whole["usage"]["completion_tokens"]
            ok = res.outcome == "ok" and res.text == text and res.tokens == tokens
            checks.append(Check("streaming", g, ok, "streamed = unstreamed, [DONE], usage"
                                if ok else f"{res.outcome} {res.error}: {len(res.text)} vs "
                                f"{len(text)} chars, {res.tokens} vs {tokens} tokens",
                                p.task_group))
    return checks


async def _scrape(client: httpx.AsyncClient, server: GroupServer) -> list[promtext.Sample]:
    r = await client.get(f"{server.url}/metrics")
    r.raise_for_status()
    return promtext.parse(r.text)


async def cancel_checks(client: httpx.AsyncClient, servers: dict[str, GroupServer],
                        prompt: Prompt, pilot: Pilot) -> list[Check]:
    checks = []
    for g, s in servers.items():
        before = promtext.requests_by_outcome(await _scrape(client, s)).get("cancelled", 0.0)
        res = RequestResult(0, prompt.task_group, 0, prompt.lang, 200, False, 0.0)
        await stream_chat(client, s.url, request_body(s.model, prompt, 200), res,
                          time.perf_counter(), stop_after_chunks=pilot.regression.cancel_after_chunks)
        counted, running = False, None
        for _ in range(40):
            samples = await _scrape(client, s)
            counted = promtext.requests_by_outcome(samples).get("cancelled", 0.0) > before
            running = promtext.gauge(samples, "specd_running_batch_size")
            if counted and not running:
                break
            await asyncio.sleep(0.25)
        after = await _chat(client, s, prompt, 8)
        ok = (res.outcome == "cancelled" and counted and not running
              and after["choices"][0]["finish_reason"] in ("stop", "length"))
        checks.append(Check("cancellation", g, ok,
                            f"closed after {res.chunks} chunks; counted cancelled: {counted}; "
                            f"running after: {running}; next request answered", prompt.task_group))
    return checks


async def run_regression(servers: dict[str, GroupServer], prompts: dict[str, list[Prompt]],
                         pilot: Pilot) -> list[Check]:
    chosen = regression_prompts(pilot, prompts)
    if not chosen:
        return []
    timeout = httpx.Timeout(max(120.0, pilot.slo.timeout_s))
    async with httpx.AsyncClient(timeout=timeout) as client:
        checks = await greedy_checks(client, servers, chosen, pilot)
        one_each = [group[0] for group in prompts.values()]
        checks += await stop_checks(client, servers, one_each, pilot)
        checks += await stream_checks(client, servers, one_each[:2], pilot)
        checks += await cancel_checks(client, servers, one_each[-1], pilot)
    return checks
