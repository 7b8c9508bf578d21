"""The tuner against a load change, side by side: one trace (flat -> peak -> flat, two task
groups) sent to the same service three times, one after another on a running local cluster
(``specd cluster up``: real workers, real Prometheus, the real operator)::

    .venv/bin/python -m specd_dev.bench.tuner --json docs/bench/tuner-cpu-DATE.json

- ``tuned``: the starting policy below, ``spec.tuning.enabled`` (only the mode may move);
- ``fixed``: the same starting policy, no tuning;
- ``plain``: plain decoding.

The starting policy is Scheme A with the classic draft model at K=4. The groups: ``chat``
decodes greedily a continuation the draft model follows, ``code`` samples at temperature 1.5
(its drafts are mostly rejected). A closed loop of streamed requests holds the concurrency of
each phase; every request's tokens, TTFT and TPOT are kept. Reported per variant, phase and
group: tokens/s (tokens of the requests finished in the phase / the phase's length), p50 and
p95 TPOT, requests and failures; and, for ``tuned``, every change the tuner made (from the
history store), in seconds from the trace's start.

The variants run one after another (a 2-core machine cannot run three 1-CPU workers side by
side without each slowing the others); the machine's own drift between them is a caveat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import sqlite3
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from specd.pilot.load import RequestResult, stream_chat
from specd_dev.cluster import control_plane
from specd_dev.cluster.handle import wait_for
from specd_dev.testing import REPO, Svc, operator_for_namespace

PROMPTS = {"chat": "Continue this: q7#Zp!x2&Lm9@vB4$kR1*tW8^yN3%cF6 ~ ",
           "code": "Write a story about a dragon."}
TEMPERATURES = {"chat": 0.0, "code": 1.5}


@dataclass(frozen=True)
class Phase:
    name: str
    concurrency: int
    seconds: float


def spec(variant: str, interval_s: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "replicas": 1,
        "model": {"reference": "smollm2-135m", "maxContext": 512},
        "drafter": {"method": "draft-model", "k": 4},
        "verification": {"mode": "plain" if variant == "plain" else "fixed", "fixedLength": 4},
        "engine": {"maxBatch": 16, "queueBound": 64, "extraArgs": ["--cost-profile=none"]},
        "worker": {"image": "specd-worker:dev",
                   "resources": {"limits": {"cpu": "1", "memory": "3Gi", "nvidia.com/gpu": 1}}},
    }
    if variant == "tuned":
        out["tuning"] = {"enabled": True, "interval": f"{interval_s}s", "referenceShare": 0.2,
                         "bounds": {"modes": ["fixed", "plain"],
                                    "fixedLength": {"min": 4, "max": 4}}}
    return out


async def closed_loop(url: str, phases: list[Phase], max_tokens: int, seed: int
                      ) -> tuple[list[tuple[str, RequestResult]], float]:
    """Each phase's concurrency held by as many request loops; a loop ends with its phase
    (its last request is counted in the phase it finished in). Returns (phase, result) pairs
    and the trace's start on the perf_counter clock."""
    results: list[tuple[str, RequestResult]] = []
    start = time.perf_counter()
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        offset = 0.0
        for p_index, phase in enumerate(phases):
            end = offset + phase.seconds

            async def loop(i: int, end: float = end, p_index: int = p_index) -> None:
                rng = random.Random(seed * 1000 + p_index * 100 + i)
                n = 0
                while time.perf_counter() - start < end:
                    group = rng.choice(sorted(PROMPTS))
                    r = RequestResult(index=n, task_group=group, prompt=0, lang="en",
                                      max_tokens=max_tokens, warmup=False,
                                      scheduled_s=time.perf_counter() - start)
                    body = {"model": "smollm2-135m", "max_tokens": max_tokens, "stream": True,
                            "stream_options": {"include_usage": True},
                            "temperature": TEMPERATURES[group],
                            "messages": [{"role": "user", "content": PROMPTS[group]}]}
                    sent = time.perf_counter()
                    await stream_chat(client, url, body, r, sent)
                    r.done_s = time.perf_counter() - start
                    finished_in = phase_of(phases, r.done_s)
                    results.append((finished_in, r))
                    n += 1

            await asyncio.gather(*(loop(i) for i in range(phase.concurrency)))
            offset = end
    return results, start


def phase_of(phases: list[Phase], t: float) -> str:
    offset = 0.0
    for phase in phases:
        offset += phase.seconds
        if t < offset:
            return phase.name
    return phases[-1].name


def summarise(results: list[tuple[str, RequestResult]], phases: list[Phase]) -> dict:
    out: dict[str, Any] = {}
    for phase in phases:
        for group in sorted(PROMPTS):
            rows = [r for p, r in results if p == phase.name and r.task_group == group]
            ok = [r for r in rows if r.outcome == "ok"]
            tpots = sorted(t for t in (r.tpot_s for r in ok) if t is not None)
            out.setdefault(phase.name, {})[group] = {
                "requests": len(rows), "failed": len(rows) - len(ok),
                "tokens_per_s": round(sum(r.tokens for r in ok) / phase.seconds, 3),
                "tpot_p50_ms": round(1000 * statistics.median(tpots), 1) if tpots else None,
                "tpot_p95_ms": round(1000 * quantile(tpots, 0.95), 1) if tpots else None,
            }
    return out


def quantile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank quantile."""
    index = max(0, min(len(sorted_values) - 1, round(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


def tuner_changes(history_url: str, service: str) -> list[dict[str, Any]]:
    path = history_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        rows = db.execute("select at, task_group, reason, evidence from policy_changes where "
                          "service = ? and applied = 1 order by at", (service,)).fetchall()
    return [{"at": at, "group": group, "action": action,
             "why": (json.loads(evidence) or {}).get("decision")
             or (json.loads(evidence) or {}).get("why")} for at, group, action, evidence in rows]


def run_variant(cluster: Any, namespace: str, operator: Any, variant: str,
                phases: list[Phase], args: argparse.Namespace) -> dict[str, Any]:
    name = f"bench-{variant}"
    svc = Svc(cluster, namespace, name)
    svc.create(spec(variant, args.interval))
    svc.wait(lambda s: s.get("phase") == "Ready", f"{name} Ready")
    url = cluster.service_url(namespace, name, ready=1)
    print(f"[{variant}] ready; trace {[(p.name, p.concurrency, p.seconds) for p in phases]}",
          flush=True)
    wall = datetime.now(UTC)
    results, _ = asyncio.run(closed_loop(url, phases, args.max_tokens, args.seed))
    out: dict[str, Any] = {"started": wall.isoformat(), "by_phase": summarise(results, phases)}
    if variant == "tuned":
        changes = tuner_changes(operator.history_url, name)
        for c in changes:
            at = datetime.fromisoformat(str(c["at"])).replace(tzinfo=UTC)
            c["t_s"] = round((at - wall).total_seconds(), 1)
        out["changes"] = changes
        out["tuning_status"] = svc.status().get("tuning")
    svc.delete()
    wait_for(lambda: not svc.tracks(), f"{name}'s pods gone", timeout=180)
    return out


def table(result: dict[str, Any], phases: list[Phase]) -> str:
    lines = [f"{'phase':<8} {'group':<6} " + "  ".join(
        f"{v + ' tok/s':>12} {'p95 TPOT':>9}" for v in result["variants"])]
    for phase in phases:
        for group in sorted(PROMPTS):
            cells = []
            for data in result["variants"].values():
                cell = data["by_phase"][phase.name][group]
                p95 = cell["tpot_p95_ms"]
                cells.append(f"{cell['tokens_per_s']:>12.2f} "
                             f"{(f'{p95:.0f} ms' if p95 is not None else '-'):>9}")
            lines.append(f"{phase.name:<8} {group:<6} " + "  ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=int, default=40, help="tuning interval, seconds")
    parser.add_argument("--flat", type=int, default=4, help="concurrency of the flat phases")
    parser.add_argument("--peak", type=int, default=16, help="concurrency of the peak")
    parser.add_argument("--flat-intervals", type=int, default=5,
                        help="length of the first flat phase, in tuning intervals")
    parser.add_argument("--peak-intervals", type=int, default=4)
    parser.add_argument("--tail-intervals", type=int, default=6,
                        help="length of the last flat phase (room for a re-probe)")
    parser.add_argument("--max-tokens", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--variants", default="tuned,fixed,plain")
    parser.add_argument("--name", default="specd", help="local cluster name")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args(argv)

    cluster = control_plane.running_cluster(args.name)
    phases = [Phase("flat", args.flat, args.flat_intervals * args.interval),
              Phase("peak", args.peak, args.peak_intervals * args.interval),
              Phase("flat2", args.flat, args.tail_intervals * args.interval)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    result: dict[str, Any] = {
        "command": "python -m specd_dev.bench.tuner " + " ".join(argv or []),
        "commit": commit, "machine": platform.platform(), "interval_s": args.interval,
        "phases": [p.__dict__ for p in phases], "max_tokens": args.max_tokens,
        "prompts": PROMPTS, "temperatures": TEMPERATURES, "variants": {}}
    work = Path(tempfile.mkdtemp(prefix="specd-tunerbench-"))
    with operator_for_namespace(cluster, work, "tunerbench",
                                extra=("--prometheus-url", cluster.prometheus_url)) as running:
        namespace, operator = running
        for variant in args.variants.split(","):
            result["variants"][variant] = run_variant(cluster, namespace, operator, variant,
                                                      phases, args)
            print(f"[{variant}] {json.dumps(result['variants'][variant]['by_phase'])}",
                  flush=True)
    print(table(result, phases))
    for change in result["variants"].get("tuned", {}).get("changes", []):
        print(f"  t={change['t_s']:>6}s {change['group']}: {change['action']} ({change['why']})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
