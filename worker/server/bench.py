"""Server benchmark: requests/s and tokens/s over HTTP at several stream concurrencies, for
several engine groups side by side in one run, and the server's overhead against the same
engine called in-process.

    python -m specd.worker.server.bench --groups plain,semi-ar-scheduled \\
        --concurrency 1,8,32 --max-tokens 32 [--drafter-path DIR] [--json OUT]

All groups share one loaded target (one ``LlamaRunner``); each group is its own engine behind
its own app, on one event loop in a background thread, so measurements run one after another,
never competing. For each concurrency the groups are measured in turn, HTTP then in-process,
on the same requests (greedy chat completions from ``worker/bench/prompts.jsonl``, streamed
with ``stream_options.include_usage``). Numbers are printed side by side as ratios; nothing
here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx

MODEL = "smollm2-135m"


@dataclass
class Measure:
    requests: int
    tokens: int
    seconds: float
    ttft_s: float  # mean time to first token
    rounds: int = 0
    accepted: int = 0

    @property
    def tau(self) -> float:
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds


async def _http_run(url: str, bodies: list[dict[str, Any]], concurrency: int) -> Measure:
    sem = asyncio.Semaphore(concurrency)
    tokens = rounds = accepted = 0
    ttfts: list[float] = []
    limits = httpx.Limits(max_connections=concurrency + 4)

    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:

        async def one(body: dict[str, Any]) -> None:
            nonlocal tokens, rounds, accepted
            async with sem:
                start = time.perf_counter()
                first = None
                async with http.stream("POST", "/v1/chat/completions", json=body) as r:
                    r.raise_for_status()
                    async for line in r.aiter_lines():
                        if not line.startswith("data: {"):
                            continue
                        chunk = json.loads(line[6:])
                        if first is None and chunk["choices"] and \
                                chunk["choices"][0]["delta"].get("content"):
                            first = time.perf_counter() - start
                        if chunk.get("usage"):
                            tokens += chunk["usage"]["completion_tokens"]
                            rounds += chunk["usage"]["speculative"]["rounds"]
                            accepted += chunk["usage"]["speculative"]["accepted"]
                ttfts.append(first if first is not None else time.perf_counter() - start)

        # warm the client (imports, connection pool) outside the timed window
        warm = {**bodies[0], "stream": False, "max_tokens": 1}
        warm.pop("stream_options", None)
        await asyncio.gather(*(http.post("/v1/chat/completions", json=warm)
                               for _ in range(min(concurrency, 8))))
        start = time.perf_counter()
        await asyncio.gather(*(one(b) for b in bodies))
        elapsed = time.perf_counter() - start
    return Measure(len(bodies), tokens, elapsed, sum(ttfts) / len(ttfts), rounds, accepted)


async def _inproc_run(engine: Any, prompts: list[list[int]], max_tokens: int,
                      concurrency: int) -> Measure:
    from specd.worker.engine import GenerationRequest, SamplingParams

    sem = asyncio.Semaphore(concurrency)
    tokens = rounds = accepted = 0
    ttfts: list[float] = []

    async def one(ids: list[int]) -> None:
        nonlocal tokens, rounds, accepted
        async with sem:
            start = time.perf_counter()
            first = None
            req = GenerationRequest(prompt_token_ids=ids, params=SamplingParams(
                max_tokens=max_tokens, temperature=0.0), task_group="chat")
            async for event in engine.submit(req):
                if first is None and event.text:
                    first = time.perf_counter() - start
                if event.finished:
                    tokens += event.completion_tokens
                    rounds += event.spec.rounds
                    accepted += event.spec.accepted
            ttfts.append(first if first is not None else time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(one(ids) for ids in prompts))
    elapsed = time.perf_counter() - start
    return Measure(len(prompts), tokens, elapsed, sum(ttfts) / len(ttfts), rounds, accepted)


def _median(measures: list[Measure]) -> Measure:
    ordered = sorted(measures, key=lambda m: m.seconds)
    return ordered[len(ordered) // 2]


def _http_in_child(url: str, bodies: list[dict[str, Any]], concurrency: int) -> Measure:
    """The load generator runs in its own process, as real clients do: sharing the server's
    interpreter (and GIL) would charge the client's own work to the server."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(_http_child_main, (url, bodies, concurrency))


def _http_child_main(url: str, bodies: list[dict[str, Any]], concurrency: int) -> Measure:
    return asyncio.run(_http_run(url, bodies, concurrency))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specd.worker.server.bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", default="plain,semi-ar-scheduled")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--requests", type=int, default=0,
                        help="requests per measurement (default: max(8, 2 x concurrency))")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3,
                        help="alternate HTTP and in-process runs this many times; medians kept")
    parser.add_argument("--k", type=int, default=3, help="draft length K of the groups")
    parser.add_argument("--drafter-path", default=None,
                        help="artifact for the trained drafters (default: the committed one)")
    parser.add_argument("--prompts", default=None, help="JSONL prompt file")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)

    from prometheus_client import CollectorRegistry

    from specd.worker.bench.groups import parse_concurrency, parse_groups
    from specd.worker.bench.prompts import DEFAULT_PROMPTS, encode_prompts, read_prompt_file
    from specd.worker.engine import Engine, EngineConfig
    from specd.worker.engine.api import TRAINED_DRAFTERS
    from specd.worker.engine.llama import LlamaRunner
    from specd.worker.model import load_model
    from specd.worker.server.app import ServerSettings, create_app
    from specd.worker.server.background import BackgroundServers

    groups = [g for g in parse_groups(args.groups) if g.mode is not None]
    concurrencies = parse_concurrency(args.concurrency)
    loaded = load_model(MODEL, args.device)
    rows = read_prompt_file(args.prompts or DEFAULT_PROMPTS)
    prompts = encode_prompts(rows, loaded.tokenizer)
    runner = LlamaRunner(loaded.model)
    max_slots = max(concurrencies)
    engines: dict[str, Any] = {}
    apps: dict[str, Any] = {}
    for g in groups:
        path = args.drafter_path if g.drafter in TRAINED_DRAFTERS else None
        config = EngineConfig(drafter=g.drafter, drafter_path=path, prompt_lookup=g.lookup,
                              max_slots=max_slots,
                              max_context=1024, cost_profile="measure")
        engine = Engine(loaded, config, policy=g.policy(args.k), registry=CollectorRegistry(),
                        runner=runner)
        engines[g.name] = engine
        settings = ServerSettings(model_name=MODEL, max_context=1024, capacity=max_slots * 2,
                                  manage_engine=False, revision=g.name)
        apps[g.name] = create_app(engine, loaded.tokenizer, settings, CollectorRegistry())
    print(f"starting {len(engines)} engines (measuring step costs) ...", file=sys.stderr)
    servers = BackgroundServers(apps, engines=list(engines.values()))
    results: dict[str, dict[str, Any]] = {g.name: {} for g in groups}
    try:
        for c in concurrencies:
            n = args.requests or max(8, 2 * c)
            chosen = [prompts[i % len(prompts)] for i in range(n)]
            bodies = [{"model": MODEL, "temperature": 0, "max_tokens": args.max_tokens,
                       "stream": True, "stream_options": {"include_usage": True},
                       "messages": rows[i % len(rows)]["messages"]} for i in range(n)]
            for g in groups:
                # warm-up at this concurrency, then HTTP and in-process on the same requests
                engine = engines[g.name]
                ids = [p.token_ids for p in chosen]
                asyncio.run(_inproc_run(engine, ids[:c], 4, c))
                https, inprocs = [], []
                for _ in range(max(1, args.repeats)):  # alternate: load drifts hit both alike
                    https.append(_http_in_child(servers.url(g.name), bodies, c))
                    # in-process: the caller's own event loop, as an embedding program has
                    inprocs.append(asyncio.run(_inproc_run(engine, ids, args.max_tokens, c)))
                http, inproc = _median(https), _median(inprocs)
                results[g.name][str(c)] = {"http": asdict(http) | {"rps": http.rps,
                                                                  "tps": http.tps,
                                                                  "tau": http.tau},
                                           "inproc": asdict(inproc) | {"rps": inproc.rps,
                                                                      "tps": inproc.tps},
                                           "overhead": 1.0 - http.tps / inproc.tps}
                print(f"  c={c:>3} {g.name:<18} http {http.rps:6.2f} req/s {http.tps:7.1f} tok/s"
                      f" | in-process {inproc.tps:7.1f} tok/s | overhead "
                      f"{100 * (1 - http.tps / inproc.tps):5.1f}%", file=sys.stderr)
    finally:
        servers.stop()

    base = groups[0].name
    print(f"\nserver benchmark: {MODEL}, greedy chat, max_tokens={args.max_tokens}, "
          f"device={loaded.device}")
    header = f"{'group':<20}{'conc':>5}{'req/s':>9}{'tok/s':>9}{'ttft s':>8}{'tau':>6}" \
             f"{'x ' + base:>10}{'inproc tok/s':>14}{'overhead':>10}"
    print(header)
    print("-" * len(header))
    for c in concurrencies:
        for g in groups:
            r = results[g.name][str(c)]
            ratio = r["http"]["tps"] / results[base][str(c)]["http"]["tps"]
            print(f"{g.name:<20}{c:>5}{r['http']['rps']:>9.2f}{r['http']['tps']:>9.1f}"
                  f"{r['http']['ttft_s']:>8.2f}{r['http']['tau']:>6.2f}{ratio:>10.2f}{r['inproc']['tps']:>14.1f}"
                  f"{100 * r['overhead']:>9.1f}%")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"model": MODEL, "max_tokens": args.max_tokens, "device": loaded.device,
                       "groups": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
