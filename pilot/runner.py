"""``specd pilot run``: preflight, regression, capacity sweep, traces x repeats.

Order of work, so that nothing is sent to a server before the pilot is known to be sound:

1. the pilot file (``config``: unknown keys, impossible SLOs, missing files refused);
2. the prompts (``prompts``) and every trace schedule that does not need a capacity
   (a bad replay file is refused here);
3. the servers: endpoints must answer ``/v1/models``; ``specd serve`` groups are started
   one after the other (so no start-up cost table is measured while another loads) and
   their cold start is recorded apart;
4. preflight: one request per group on the idle servers; an SLO that no idle group meets is
   impossible on this hardware and refused, naming ``slo.ttft_s`` / ``slo.e2e_s``;
5. business regression (``regression``);
6. capacity: a sweep per group (same seeded Poisson schedule per rate for every group)
   finds the highest rate whose SLO attainment holds;
7. traces relative to G0's capacity, ``repeats`` times: each repeat is a new seed, the same
   for every group; the group order rotates per trace and repeat, so a slow stretch of the
   machine does not always land on the same group.

Everything is written under ``--out`` as it happens (``run.json`` last), then the report.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import httpx

from specd.pilot import traces as tr
from specd.pilot.config import GROUPS, Pilot, PilotError, TraceSpec
from specd.pilot.load import RequestResult, RunOutput, request_body, run_schedule, stream_chat
from specd.pilot.prompts import Prompt, load_prompts
from specd.pilot.regression import run_regression
from specd.pilot.servers import GroupServer, attach, spawn, wait_ready

log = logging.getLogger("specd.pilot")


def attainment(results: list[RequestResult], slo: Any) -> tuple[float, int]:
    """Share of the measured (non-warm-up) requests that met the SLO; failures count."""
    measured = [r for r in results if not r.warmup]
    if not measured:
        return 0.0, 0
    return sum(r.meets(slo) for r in measured) / len(measured), len(measured)


def _dump(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False, default=str))


def save_run(path: Path, out: RunOutput, arrivals: list[tr.Arrival], meta: dict) -> None:
    _dump(path, {**meta, "wall_s": out.wall_s,
                 "arrivals": [a.to_json() for a in arrivals],
                 "results": [r.to_json() for r in out.results],
                 "scrapes": [{"t": s.t, "text": s.text, "error": s.error} for s in out.scrapes]})


class PilotRun:
    def __init__(self, pilot: Pilot, out_dir: Path) -> None:
        self.pilot = pilot
        self.out = out_dir
        self.servers: dict[str, GroupServer] = {}
        self.prompts: dict[str, list[Prompt]] = {}
        self.index: dict[str, Any] = {"pilot": pilot.model_dump(mode="json"), "groups": {},
                                      "capacity": {}, "traces": {}, "runs": [], "events": []}
        self.outputs: dict[tuple[str, int, str], list[RequestResult]] = {}

    def event(self, message: str) -> None:
        log.info("%s", message)
        self.index["events"].append({"t": time.time(), "message": message})

    # ---- steps ---------------------------------------------------------------------------

    def prepare(self) -> None:
        self.prompts = load_prompts(self.pilot)
        for t in self.pilot.traces:  # refuse a bad schedule (a replay file) before any load
            tr.build_schedule(self.pilot, t, t.rate or 1.0, self.prompts, 0)

    def bring_up(self) -> None:
        for g in GROUPS:  # endpoints first: an unreachable one refuses before anything starts
            spec = self.pilot.groups[g]
            if spec.endpoint is not None:
                self.servers[g] = attach(g, spec)
        started = [g for g in GROUPS if self.pilot.groups[g].serve is not None]
        if self.pilot.parallel_start:  # all at once: cold starts overlap (said in the report)
            for g in started:
                self.servers[g] = spawn(g, self.pilot.groups[g], self.out)
        for g in started:
            spec = self.pilot.groups[g]
            assert spec.serve is not None
            if g not in self.servers:
                self.event(f"starting {g}: {spec.serve.drafter}, {spec.serve.max_slots} slots")
                self.servers[g] = spawn(g, spec, self.out)
            wait_ready(self.servers[g], spec)
            self.event(f"{g} ready after {self.servers[g].cold_start_s:.1f} s")
        self.index["groups"] = {g: s.to_json() for g, s in self.servers.items()}

    async def preflight(self) -> None:
        slo = self.pilot.slo
        seen: dict[str, dict[str, Any]] = {}
        longest = max(self.pilot.task_groups.values(), key=lambda t: t.output.max)
        name = next(n for n, t in self.pilot.task_groups.items() if t is longest)
        prompt = self.prompts[name][0]
        async with httpx.AsyncClient(timeout=slo.timeout_s) as client:
            for g, s in self.servers.items():
                best: RequestResult | None = None
                for _ in range(2):  # the first request after start-up may be cold
                    res = RequestResult(0, name, 0, prompt.lang, longest.output.max, False, 0.0)
                    await stream_chat(client, s.url, request_body(s.model, prompt,
                                                                  longest.output.max),
                                      res, time.perf_counter())
                    if res.outcome != "ok":
                        raise PilotError(f"groups.{g}: the preflight request failed "
                                         f"({res.outcome}: {res.error}); no load was sent")
                    if best is None or (res.e2e_s or 0) < (best.e2e_s or 0):
                        best = res
                assert best is not None
                seen[g] = {"ttft_s": best.ttft_s, "e2e_s": best.e2e_s, "tokens": best.tokens,
                           "tpot_s": best.tpot_s}
        self.index["preflight"] = seen
        for field_name, key in (("ttft_s", "ttft_s"), ("e2e_s", "e2e_s"), ("tpot_s", "tpot_s")):
            bound = getattr(slo, field_name)
            values = [v[key] for v in seen.values() if v[key] is not None]
            if values and min(values) > bound:
                raise PilotError(
                    f"slo.{field_name}: impossible on these servers: the fastest idle group "
                    f"took {min(values):.3g} s for one request of {longest.output.max} tokens "
                    f"(bound {bound:g} s); no load was sent")

    async def run_one(self, g: str, arrivals: list[tr.Arrival], path: Path, meta: dict
                      ) -> RunOutput:
        s = self.servers[g]
        out = await run_schedule(s.url, s.model, arrivals, self.prompts, self.pilot.slo,
                                 self.pilot.window_s)
        mem = s.memory()
        save_run(path, out, arrivals, {**meta, "group": g, "memory": mem,
                                       "server_alive": s.alive()})
        counts: dict[str, int] = {}
        for r in out.results:
            counts[r.outcome] = counts.get(r.outcome, 0) + 1
        self.index["runs"].append({**meta, "group": g, "file": str(path.relative_to(self.out)),
                                   "outcomes": counts, "memory": mem, "alive": s.alive()})
        return out

    async def capacity(self, g: str) -> dict[str, Any]:
        cap = self.pilot.capacity
        slo = self.pilot.slo
        steps: list[dict[str, Any]] = []
        good: float | None = None
        bad: float | None = None

        async def step(rate: float) -> bool:
            arrivals = tr.capacity_schedule(self.pilot, rate, self.prompts)
            path = self.out / "raw" / "capacity" / g / f"rate-{rate:.4f}.json"
            out = await self.run_one(g, arrivals, path, {"phase": "capacity", "rate": rate})
            att, n = attainment(out.results, slo)
            ok = n > 0 and att >= slo.attainment
            steps.append({"rate": rate, "attainment": att, "requests": n, "ok": ok})
            self.event(f"capacity {g} @ {rate:.3g} req/s: attainment {att:.2f} of {n}")
            return ok

        rate = cap.start_rate
        for _ in range(cap.max_steps):
            if await step(rate):
                good = rate
                if bad is not None:
                    break  # stepped down to a rate that holds
                rate *= cap.growth
            else:
                bad = rate
                if good is not None:
                    break
                rate /= cap.growth  # the start rate already fails: step down
        for _ in range(cap.refine if good is not None and bad is not None else 0):
            assert good is not None and bad is not None
            mid = math.sqrt(good * bad)
            if await step(mid):
                good = mid
            else:
                bad = mid
        result = {"capacity_rps": good, "first_failing_rps": bad, "steps": steps,
                  "saturated_search": bad is None}
        self.index["capacity"][g] = result
        return result

    def trace_rate(self, t: TraceSpec) -> float:
        if t.rate is not None:
            return t.rate
        cap = self.index["capacity"]["G0"]["capacity_rps"]
        assert t.load is not None and cap
        return t.load * cap

    async def traces(self) -> None:
        for r in range(self.pilot.repeats):
            for k, t in enumerate(self.pilot.traces):
                rate = self.trace_rate(t)
                arrivals = tr.build_schedule(self.pilot, t, rate, self.prompts, r)
                self.index["traces"].setdefault(t.name, {
                    "spec": t.model_dump(mode="json"), "rate_rps": rate, "repeats": {}})
                self.index["traces"][t.name]["repeats"][str(r)] = {
                    "arrivals": len(arrivals), "warmup": sum(a.warmup for a in arrivals)}
                shift = (r + k) % len(GROUPS)
                order = list(GROUPS[shift:] + GROUPS[:shift])
                for g in order:
                    path = self.out / "raw" / t.name / f"repeat-{r}" / f"{g}.json"
                    out = await self.run_one(g, arrivals, path, {
                        "phase": "trace", "trace": t.name, "repeat": r, "rate": rate})
                    self.outputs[(t.name, r, g)] = out.results
                    att, n = attainment(out.results, self.pilot.slo)
                    self.event(f"{t.name} repeat {r} {g}: {n} measured, attainment {att:.2f}")
                self.save()

    async def trace_divergences(self, limit: int = 8) -> None:
        """Probe (idle) the prompts whose trace outputs differ between G0 and G1."""
        from specd.operator.analysis.probes import ProbeAnswer, compare

        found = []
        for (t, r, g), results in self.outputs.items():
            if g != "G1" or (t, r, "G0") not in self.outputs:
                continue
            for a, b in zip(self.outputs[(t, r, "G0")], results, strict=False):
                if a.outcome == b.outcome == "ok" and a.text != b.text:
                    found.append((t, a))
        traced = []
        async with httpx.AsyncClient(timeout=120.0) as client:
            for t, a in found[:limit]:
                text = self.prompts[a.task_group][a.prompt].chatml()
                answers = []
                for g in ("G0", "G1"):
                    resp = await client.post(f"{self.servers[g].url}/specd/v1/probe",
                                             json={"prompts": [text],
                                                   "max_tokens": a.max_tokens})
                    answers.append(ProbeAnswer.from_json(resp.json()["results"][0])
                                   if resp.status_code == 200 else None)
                if None in answers:
                    traced.append({"trace": t, "index": a.index, "outcome": "untraced",
                                   "detail": "no probe route"})
                    continue
                c = compare(a.index, answers[0], answers[1], self.pilot.regression.near_tie_gap)
                outcome = c.outcome if c.outcome != "identical" else "not reproduced at idle"
                traced.append({"trace": t, "index": a.index, "outcome": outcome,
                               "detail": c.detail})
        self.index["trace_divergences"] = traced
        self.index["trace_divergences_found"] = len(found)

    def save(self) -> None:
        self.index["groups"] = {g: s.to_json() for g, s in self.servers.items()}
        _dump(self.out / "run.json", self.index)

    async def main(self) -> None:
        await self.preflight()
        self.event("preflight passed; business regression")
        checks = await run_regression(self.servers, self.prompts, self.pilot)
        self.index["regression"] = [c.to_json() for c in checks]
        self.event(f"regression: {sum(c.ok for c in checks)}/{len(checks)} checks passed")
        self.save()
        for g in GROUPS:
            await self.capacity(g)
            self.save()
        if not self.index["capacity"]["G0"]["capacity_rps"] and any(
                t.load is not None for t in self.pilot.traces):
            raise PilotError(f"capacity.start_rate: G0 misses the SLO even at "
                             f"{self.pilot.capacity.start_rate:g} req/s; lower it (or loosen "
                             "the SLO)")
        await self.traces()
        await self.trace_divergences()


def run_pilot(pilot: Pilot, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run = PilotRun(pilot, out)
    run.index["started"] = time.time()
    try:
        run.prepare()
        run.bring_up()
        run.save()
        asyncio.run(run.main())
        run.index["finished"] = time.time()
    finally:
        run.save()
        for s in run.servers.values():
            s.stop()
    return out
