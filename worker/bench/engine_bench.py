"""``specd bench engine``: every group over the same prompts at each concurrency, one run.

Concurrency C means C requests in flight at once: a client keeps C streams open and starts
the next prompt when one finishes, like C users. Every figure of every group comes from the
same process and the same prompts, so the ratios between groups are what to read (the
machine is shared and noisy; absolute numbers drift, ratios measured side by side do not).
Engine groups run interleaved (all groups at one concurrency, then the next), so the cells
compared with each other are measured close together in time. With ``--min-seconds S`` the
groups at one concurrency run in repeated passes (the order turning, ``run_order``) until
each has run S seconds there, and a cell's tokens/s is the median of its passes: short cells
(high concurrency, a few seconds each) are the noisiest, and they get the most passes. Within
a pass the prompts run in slices (``slices``: whole waves of C, at least ``SLICE_PROMPTS`` prompts),
every group taking each slice in turn, so a slow minute of the machine falls on
every group alike instead of on whichever group's long cell it hit (at C=1 one group's pass
over 40 prompts took about 80 s).

A slice ends in a drain: once no prompt is left to start, the batch shrinks as requests end.
Plain decoding's rows emit one token a round and end together; a speculative group's rows
commit a varying number a round and end rounds apart, so its last rounds run with a few rows
and the slice's tokens/s understates what it does with C users kept busy. Each cell therefore
also reports ``full_batch_tokens_per_s`` (``full_batch``): the tokens of the engine's rounds
with all C slots decoding and no prompt prefilling, over those rounds' wall time (each from
the end of the round before): the decode rate of a server whose batch stays full under C
users. Every group's admissions are left out alike (each group prefills the same prompts
once; until 2026-12-08 the rate was taken over a window of the client's events that held a
speculative group's refills but not plain's, docs/bench/RESULTS.md); at C=1 it is every
decoding round, and with fewer prompts than C there is none (no rate).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from specd.api import metrics as names
from specd.worker.bench.drafting_ledger import Ledger, Round, drafting_ledger
from specd.worker.bench.groups import TWIN, Group, kind_of, parse_sampling
from specd.worker.bench.prompts import BenchPrompt
from specd.worker.bench.run_order import in_turn


@dataclass
class Cell:
    """One group at one concurrency."""

    outputs: list[list[int]]
    seconds: float
    per_request_tokens_per_s: list[float]
    rounds: int = 0
    drafted: int = 0
    verified: int = 0
    accepted: int = 0
    verified_requests: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    peak_rss_mb: float = 0.0
    memory: dict[str, int] = field(default_factory=dict)  # Engine.memory_bytes()
    costs: Any = None  # the engine's measured scheduler.CostTable
    match_plain: bool | None = None
    matched_requests: int = 0
    divergence_top2_gap_max: float | None = None  # see mark_matches
    started_s: float | None = None  # when the cell began, seconds into the engine groups' run
    pass_seconds: list[float] = field(default_factory=list)  # every pass; seconds = their sum
    # per pass: tokens and seconds while the batch was full (summed over the pass's slices)
    full_tokens: list[int] = field(default_factory=list)
    full_seconds: list[float] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)  # drafting vs the engine's own plain rounds

    def __post_init__(self) -> None:
        if not self.pass_seconds:
            self.pass_seconds = [self.seconds]
        if not self.full_tokens:
            self.full_tokens, self.full_seconds = [0], [0.0]

    def add_pass(self, other: Cell) -> None:
        """Fold a repeated pass over the same prompts into this cell (outputs: the first's)."""
        self.pass_seconds += other.pass_seconds
        self.full_tokens += other.full_tokens
        self.full_seconds += other.full_seconds
        self._add_counts(other)

    def add_slice(self, other: Cell) -> None:
        """Append the next slice of prompts of the same pass (outputs in prompt order)."""
        self.outputs += other.outputs
        self.pass_seconds[-1] += other.seconds
        self.full_tokens[-1] += sum(other.full_tokens)
        self.full_seconds[-1] += sum(other.full_seconds)
        self._add_counts(other)

    def _add_counts(self, other: Cell) -> None:
        self.seconds += other.seconds
        self.per_request_tokens_per_s += other.per_request_tokens_per_s
        for name in ("rounds", "drafted", "verified", "accepted", "verified_requests"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.ledger += other.ledger
        for phase, sec in other.phase_seconds.items():
            self.phase_seconds[phase] = self.phase_seconds.get(phase, 0.0) + sec
        self.peak_rss_mb = max(self.peak_rss_mb, other.peak_rss_mb)

    def summary(self) -> dict[str, Any]:
        tokens = sum(len(o) for o in self.outputs)
        phase_total = sum(self.phase_seconds.values())
        rates = [tokens / s for s in self.pass_seconds if s]
        full = [t / s for t, s in zip(self.full_tokens, self.full_seconds, strict=True) if s]
        return {
            # the median pass (one pass: its rate)
            "tokens_per_s": statistics.median(rates) if rates else 0.0,
            "passes_tokens_per_s": [round(r, 3) for r in rates],
            "full_batch_tokens_per_s": statistics.median(full) if full else None,
            "passes_full_batch_tokens_per_s": [round(r, 3) for r in full],
            "per_request_tokens_per_s": (sum(self.per_request_tokens_per_s)
                                         / len(self.per_request_tokens_per_s)),
            "tau": ((self.accepted + self.rounds) / self.rounds) if self.rounds else None,
            "truncation_ratio": ((self.drafted - self.verified) / self.drafted
                                 if self.drafted else None),
            "mean_verified": (self.verified / self.verified_requests
                              if self.verified_requests else None),
            "phase_share": ({p: s / phase_total for p, s in self.phase_seconds.items()}
                            if phase_total else {}),
            # drafting rounds priced against the same engine's plain rounds (drafting_ledger):
            # what drafting cost (+) or saved (-) as a share of the round time
            "drafting_excess_share": self.ledger.excess_share(),
            "drafting_rounds": self.ledger.drafted,
            "drafting_priced_rounds": self.ledger.priced,
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "drafter_memory_mb": (round(self.memory["drafter"] / 2**20, 2)
                                  if self.memory else None),
            # the drafter's weights and caches over the target's weights and KV cache (both
            # caches are sized by the same slots x context)
            "drafter_memory_share": (self.memory["drafter"]
                                     / (self.memory["target"] + self.memory["kv_cache"])
                                     if self.memory else None),
            "step_cost_ms": _cost_ms(self.costs),
            "step_cost_by_rows_ms": ({str(r): _cost_ms(t) for r, t in self.costs.by_rows}
                                     if self.costs is not None else None),
            "pad_to": list(self.costs.pad_to) if self.costs is not None else None,
            "pad_to_one_row": (list(self.costs.one_row_pad_to()) if self.costs is not None
                               else None),
            "match_plain": self.match_plain,
            "matched_requests": self.matched_requests,
            "divergence_top2_gap_max": (round(self.divergence_top2_gap_max, 4)
                                        if self.divergence_top2_gap_max is not None else None),
            "requests": len(self.outputs),
            "output_tokens": tokens,  # per pass
            "seconds": round(self.seconds, 3),
            "started_s": round(self.started_s, 1) if self.started_s is not None else None,
        }


def _cost_ms(costs: Any) -> dict[str, float] | None:
    """A CostTable as {token count: milliseconds}."""
    if costs is None:
        return None
    return {str(t): round(sec * 1e3, 2) for t, sec in zip(costs.tokens, costs.seconds, strict=True)}


class RssSampler:
    """Samples this process's resident set size in the background; keeps the peak."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, _rss_kb())
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self.peak_kb = _rss_kb()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_mb(self) -> float:
        return self.peak_kb / 1024


def _rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _phase_seconds(registry: Any) -> dict[str, float]:
    totals: dict[str, float] = {}
    for metric in registry.collect():
        if metric.name != names.ROUND_PHASE_SECONDS:
            continue
        for sample in metric.samples:
            if sample.name.endswith("_sum"):
                phase = sample.labels[names.LABEL_PHASE]
                totals[phase] = totals.get(phase, 0.0) + sample.value
    return totals


GOLDEN = 0.6180339887498949


def request_length(max_tokens: int, index: int, spread: float = 0.0) -> int:
    """Output tokens of prompt ``index``: ``max_tokens``, or with ``spread`` (0..1) spread
    evenly over [(1 - spread) * max_tokens, max_tokens] by the golden-ratio sequence, the
    same in every group. Equal lengths end a closed batch of plain requests in one round,
    so plain admits the next wave in one prefill and drains as one batch while a speculative
    group's requests end rounds apart; real outputs vary, and with a spread plain's do too."""
    if spread <= 0.0:
        return max_tokens
    return max(1, round(max_tokens * (1.0 - spread * ((index * GOLDEN) % 1.0))))


def request_params(group: Group | None, max_tokens: int, index: int,
                   spread: float = 0.0) -> Any:
    """The SamplingParams of prompt ``index`` in ``group`` (its sampling variant; seeded
    variants: seed SEED_BASE + the prompt's index in the whole prompt list; its length:
    ``request_length``)."""
    from specd.worker.bench.groups import SEED_BASE
    from specd.worker.engine import SamplingParams

    max_tokens = request_length(max_tokens, index, spread)
    if group is None or group.sampling == "greedy":
        return SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    return SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=group.temperature,
                          seed=SEED_BASE + index if group.seeded else None)


async def _drive(engine: Any, prompts: Sequence[BenchPrompt], concurrency: int,
                 max_tokens: int, bar: tqdm, group: Group | None = None, first: int = 0,
                 spread: float = 0.0) -> Driven:
    from specd.worker.engine import GenerationRequest

    outputs: list[Any] = [None] * len(prompts)
    rates: list[float] = [0.0] * len(prompts)
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, prompt: BenchPrompt) -> None:
        async with gate:
            params = request_params(group, max_tokens, first + i, spread)
            request = GenerationRequest(list(prompt.token_ids), params, prompt.task_group)
            began = time.perf_counter()
            tokens: list[int] = []
            last = None
            async for event in engine.submit(request):
                tokens.extend(event.token_ids)
                last = event
            outputs[i] = (tokens, last.spec if last else None)
            rates[i] = len(tokens) / (time.perf_counter() - began)
            bar.update(1)

    start = time.perf_counter()
    await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    return Driven(outputs, time.perf_counter() - start, rates)


@dataclass
class Driven:
    """One slice of prompts driven through an engine: each request's (tokens, SpecStats),
    the slice's seconds, each request's tokens/s."""

    outputs: list[Any]
    seconds: float
    rates: list[float]


def full_batch(rounds: Sequence[Round], walls: Sequence[float],
               concurrency: int) -> tuple[int, float]:
    """The tokens and wall seconds of the ``rounds`` (each with its wall time in ``walls``)
    that ran all ``concurrency`` slots decoding with no prompt prefilling."""
    full = [(r.committed, w) for r, w in zip(rounds, walls, strict=True)
            if r.rows == concurrency and r.clean]
    return sum(t for t, _ in full), sum(w for _, w in full)


MAX_PASSES = 5
SLICE_PROMPTS = 8


def slices(n_prompts: int, concurrency: int) -> list[tuple[int, int]]:
    """[lo, hi) prompt ranges of a pass: whole waves of ``concurrency``, at least
    ``SLICE_PROMPTS`` prompts each, the last slice taking the remainder (so at C=32 over 40
    prompts the pass stays one slice: its last 8 requests start as the first ones finish,
    as before). A slice drains before the next begins, which every group pays alike."""
    size = concurrency * max(1, -(-SLICE_PROMPTS // concurrency))
    count = max(1, n_prompts // size)
    return [(i * size, n_prompts if i == count - 1 else (i + 1) * size) for i in range(count)]


def run_engine_groups(loaded: Any, groups: Sequence[Group], prompts: Sequence[BenchPrompt],
                      concurrencies: Sequence[int], max_tokens: int, k: int,
                      drafter_path: str | None = None, on_cell: Any = None,
                      engine_options: dict[str, Any] | None = None,
                      min_seconds: float = 0.0, passes: int = 1,
                      length_spread: float = 0.0) -> dict[str, dict[int, Cell]]:
    """Run engine groups interleaved: every group at one concurrency, then the next.

    One engine per group (each with its own measured cost profile) stays up for the whole
    run (its round thread only while its cell runs), so the groups compared at a concurrency
    run minutes apart rather than an hour apart
    (this machine's speed drifts); each pass runs the prompts in ``slices``, every group
    taking each slice, the order of the groups turning from slice to slice in a balanced
    design (``run_order``) so no group always runs first, or after the same group, or twice in a
    row. With ``min_seconds`` the groups at a concurrency repeat in
    passes until each has run that long there (at most ``MAX_PASSES``), and in at least
    ``passes`` passes (a count of repeats that does not depend on how fast a cell runs); every
    cell then holds all its passes (``Cell.add_pass``). ``on_cell(group, concurrency)`` is
    called before each cell; ``engine_options``: further EngineConfig fields (tests:
    ``cost_profile="none"``); ``length_spread``: ``request_length``.
    """
    from prometheus_client import CollectorRegistry

    from specd.worker.engine import Engine, EngineConfig

    max_prompt = max(len(p.token_ids) for p in prompts)
    # groups that differ only in their sampling variant (``Group.base``) share one engine
    engines: dict[str, tuple[Any, Any]] = {}
    for group in groups:
        if group.base in engines:
            continue
        config = EngineConfig(drafter=group.drafter, drafter_path=drafter_path,
                              prompt_lookup=group.lookup,
                              max_slots=max(concurrencies),
                              max_context=(max_prompt + max_tokens
                                           + 2 * group.draft_length(k) + 8),
                              **(engine_options or {}))
        registry = CollectorRegistry()
        engines[group.base] = (Engine(loaded, config, policy=group.policy(k), registry=registry),
                               registry)
    cells: dict[str, dict[int, Cell]] = {g.name: {} for g in groups}

    async def run_all() -> None:
        # only the engine of the running cell keeps a live round thread (``threads``: a second
        # thread that has run torch work slows every step by ~1.7x on a small CPU)
        # one step-cost table for every engine: it is the target's on this machine, and
        # each engine measuring its own drew its own padding from noisy timings, which
        # moved the ratios between groups by a few percent (docs/engine.md)
        shared = None
        for engine, _ in engines.values():
            if shared is not None:
                engine.use_costs(shared)
            await engine.start()  # the first measures the table
            await engine.stop()
            shared = shared or engine.costs
        began = time.perf_counter()
        turn = 0
        for concurrency in concurrencies:
            for done in range(1, max(MAX_PASSES, passes) + 1):
                this_pass: dict[str, Cell] = {}
                for lo, hi in slices(len(prompts), concurrency):
                    order = in_turn(groups, turn)
                    turn += 1
                    for group in order:
                        if on_cell is not None:
                            on_cell(group.name, concurrency)
                        engine, registry = engines[group.base]
                        at = time.perf_counter() - began
                        await engine.start()
                        try:
                            cell = await _run_cell(engine, registry, group.name,
                                                   prompts[lo:hi], concurrency, max_tokens,
                                                   group, lo, length_spread)
                        finally:
                            await engine.stop(drain=False)
                        if group.name in this_pass:
                            this_pass[group.name].add_slice(cell)
                        else:
                            cell.started_s = at
                            this_pass[group.name] = cell
                for name, cell in this_pass.items():
                    if concurrency in cells[name]:
                        cells[name][concurrency].add_pass(cell)
                    else:
                        cells[name][concurrency] = cell
                if done >= passes and all(cells[g.name][concurrency].seconds >= min_seconds
                                          for g in groups):
                    break

    asyncio.run(run_all())
    return cells


async def _run_cell(engine: Any, registry: Any, name: str, prompts: Sequence[BenchPrompt],
                    concurrency: int, max_tokens: int, group: Group | None = None,
                    first: int = 0, spread: float = 0.0) -> Cell:
    before = _phase_seconds(registry)
    bar = tqdm(total=len(prompts), desc=f"{name} c={concurrency}", leave=False, unit="req")
    rounds: list[Round] = []
    walls: list[float] = []  # each round's wall time, from the end of the round before
    ended = [time.perf_counter()]

    def listen(st: Any) -> None:  # a RoundStats, on the engine's thread
        now = time.perf_counter()
        rounds.append(Round(st.rows, st.kind == "speculative", st.seconds, st.emitted,
                            st.prefill_tokens == 0))
        walls.append(now - ended[0])
        ended[0] = now

    engine.core.round_listeners.append(listen)
    try:
        with RssSampler() as rss:
            driven = await _drive(engine, prompts, concurrency, max_tokens, bar, group, first,
                                  spread)
        # a round's requests hear of their end before the round's listeners run: stop the
        # round thread so the slice's last round is in ``rounds`` and the phase counters
        await engine.stop()
    finally:
        engine.core.round_listeners.remove(listen)
    bar.close()
    full_tokens, full_seconds = full_batch(rounds, walls, concurrency)
    after = _phase_seconds(registry)
    cell = Cell([r[0] for r in driven.outputs], driven.seconds, driven.rates,
                peak_rss_mb=rss.peak_mb,
                phase_seconds={p: after[p] - before.get(p, 0.0) for p in after},
                memory=engine.memory_bytes(), costs=engine.costs,
                full_tokens=[full_tokens], full_seconds=[full_seconds],
                ledger=drafting_ledger(rounds))
    for _, spec in driven.outputs:
        if spec is not None:
            cell.rounds += spec.rounds
            cell.drafted += spec.drafted
            cell.verified += spec.verified
            cell.accepted += spec.accepted
            cell.verified_requests += spec.rounds if spec.verified else 0
    return cell


def run_peer_group(loaded: Any, group: Group, prompts: Sequence[BenchPrompt],
                   max_tokens: int, draft_model: Any | None) -> dict[int, Cell]:
    """transformers' own loops, batch 1 only (they have no continuous batching)."""
    from specd.worker.bench.peers import run_hf_peer

    bar = tqdm(total=len(prompts), desc=f"{group.name} c=1", leave=False, unit="req")
    with RssSampler() as rss:
        result = run_hf_peer(
            loaded.model, prompts, max_tokens,
            assistant=draft_model if group.peer == "assisted-draft" else None,
            prompt_lookup=4 if group.peer == "assisted-lookup" else 0,
            on_done=lambda: bar.update(1))
    bar.close()
    return {1: Cell(result.outputs, result.seconds, result.per_request_tokens_per_s,
                    peak_rss_mb=rss.peak_mb)}


def mark_matches(results: dict[str, dict[int, Cell]], eos_ids: Sequence[int] = (),
                 until_eos: Sequence[str] = (), top2_gap: TopTwoGap | None = None) -> None:
    """Compare every cell's outputs with plain's at the same concurrency (or c=1).

    A group with a sampling variant (``<group>@t1.0-seeded``) is compared with plain's group
    of the same variant (``plain@t1.0-seeded``): seeded outputs must match (the coupled
    rule); unseeded sampled groups are not compared.
    Groups named in ``until_eos`` (transformers' loops) are compared up to plain's first
    end-of-turn token: with ``ignore_eos`` the engine emits it and goes on, while
    ``min_new_tokens`` masks it and takes the runner-up, so past it the two differ by design.
    ``top2_gap(request index, tokens)``: the target's top-2 logit gap after a request's
    prompt and these tokens; each divergence is measured there (``divergence_top2_gap_max``:
    a near-tie where batched sums round the other way, or a real bug when large).
    """
    for name, cells in results.items():
        base, _, variant = name.partition("@")
        if variant and not parse_sampling(variant)[1] and variant != "greedy":
            continue  # unseeded sampling: no two runs draw alike, nothing to compare
        plain = results.get("plain" + (f"@{variant}" if variant else ""), {})
        gap = top2_gap if not variant or variant == "greedy" else None  # greedy's measure
        for concurrency, cell in cells.items():
            reference = plain.get(concurrency) or plain.get(min(plain)) if plain else None
            if reference is None:
                continue
            same, gaps = [], []
            for i, (got, want) in enumerate(zip(cell.outputs, reference.outputs, strict=True)):
                n = _first(want, eos_ids) if name in until_eos else None  # None: whole
                same.append(got[:n] == want[:n])
                if not same[-1] and gap is not None and name not in until_eos:
                    gaps.append(gap(i, want[: first_divergence(got, want)]))
            cell.matched_requests = sum(same)
            cell.match_plain = all(same)
            cell.divergence_top2_gap_max = max(gaps) if gaps else None


# (request index, tokens after its prompt) -> the target's top-2 logit gap there
TopTwoGap = Callable[[int, list[int]], float]


def top2_gap(model: Any, ids: Sequence[int]) -> float:
    """The model's top-2 logit gap after ``ids`` (one forward)."""
    import torch

    device = next(model.parameters()).device
    with torch.inference_mode():
        top = model(torch.tensor([list(ids)], device=device)).logits[0, -1].float().topk(2).values
    return float(top[0] - top[1])


def keyed_top2_gap(model: Any, ids: Sequence[int], params: Any, position: int) -> float:
    """A seeded request's near-tie measure: after ``ids`` (prompt + the output's first
    ``position`` tokens), the gap between the two best keyed scores log p(v) - log E(seed,
    position, v) of the target at batch 1 (``params``: the request's SamplingParams). Batched
    float sums may flip the keyed sample only where this gap is near 0, as for greedy."""
    import torch

    from specd.worker.engine.keyed import vocab_exponential
    from specd.worker.engine.verifier import target_probs

    device = next(model.parameters()).device
    with torch.inference_mode():
        logits = model(torch.tensor([list(ids)], device=device)).logits[0, -1:].float()
    p = target_probs(logits, torch.tensor([params.temperature], device=device),
                     torch.tensor([params.top_k], device=device),
                     torch.tensor([params.top_p], device=device))
    noise = vocab_exponential([params.seed], [position], p.shape[-1], device)
    top = (torch.log(p.double()) - torch.log(noise.double()))[0].topk(2).values
    return float(top[0] - top[1])


def first_divergence(got: Sequence[int], want: Sequence[int]) -> int:
    """Index of the first token where two outputs differ (the shorter length if one is a
    prefix of the other)."""
    return next((j for j, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                min(len(got), len(want)))


def target_top2_gap(model: Any, prompts: Sequence[BenchPrompt]) -> TopTwoGap:
    """``mark_matches``' gap measure: the target over a request's prompt + tokens."""
    return lambda index, tokens: top2_gap(model, [*prompts[index].token_ids, *tokens])


def _first(tokens: list[int], ids: Sequence[int]) -> int:
    """Index of the first token in ``ids`` (len(tokens) when none is there)."""
    return next((i for i, t in enumerate(tokens) if t in ids), len(tokens))


def report(model: str, results: dict[str, dict[int, Cell]], settings: dict[str, Any]) -> dict:
    groups = {g: {str(c): cell.summary() for c, cell in sorted(cells.items())}
              for g, cells in results.items()}
    doc = {"model": model, "settings": settings, "groups": groups,
           "comparisons": comparisons(groups)}
    coupled = coupled_vs_standard(groups)
    if coupled:
        doc["coupled_vs_standard"] = coupled
    return doc


def coupled_vs_standard(groups: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per engine group, temperature and concurrency: tau and tokens/s of seeded requests
    (the coupled rule, ``<group>@tT-seeded``) beside unseeded ones (the standard rule,
    ``<group>@tT``), from the same run."""
    out: dict[str, Any] = {}
    for name, cells in groups.items():
        base, _, variant = name.partition("@")
        if not variant.endswith("-seeded") or f"{base}@{variant[:-7]}" not in groups:
            continue
        std = groups[f"{base}@{variant[:-7]}"]
        rows = {}
        for conc, cell in cells.items():
            if conc not in std:
                continue
            s, c = std[conc], cell
            rows[conc] = {"tau_standard": s["tau"], "tau_coupled": c["tau"],
                          "tokens_per_s_standard": round(s["tokens_per_s"], 2),
                          "tokens_per_s_coupled": round(c["tokens_per_s"], 2),
                          "speed_coupled_vs_standard": (c["tokens_per_s"] / s["tokens_per_s"]
                                                        if s["tokens_per_s"] else None)}
        out.setdefault(base, {})[variant[:-7]] = rows
    return out


def comparisons(groups: dict[str, dict[str, dict[str, Any]]],
                scheduled: tuple[str, ...] = ("semi-ar-scheduled", "semi-ar-lookup-scheduled"),
                rivals: tuple[str, ...] = ("plain", "parallel-fixed", "semi-ar-fixed",
                                           "semi-ar-lookup-fixed")
                ) -> dict[str, Any]:
    """Scheme B (with and without prompt lookup beside it, whichever ran; at every draft
    length that ran) against plain decoding and the best fixed length (of every fixed group
    and draft length that ran), per concurrency, all from the one run (the ratios
    the seeds' claims are about); with ``plain-twin`` in the run, also the twin's ratio to
    plain (identical work: how far from 1.00 a ratio reads by noise alone)."""
    names = [g for g in groups if kind_of(g) in scheduled and "@" not in g] or list(scheduled[:1])
    rival_names = tuple(g for g in groups if kind_of(g) in rivals and "@" not in g)
    return {name: _compare(groups, name, rival_names) for name in names}


def _compare(groups: dict[str, dict[str, dict[str, Any]]], scheduled: str,
             rivals: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sched = groups.get(scheduled, {})
    for conc, cell in sched.items():
        row: dict[str, Any] = {}
        # over whole slices (drain included), then while the batch is full (see the module)
        for key, prefix in (("tokens_per_s", ""), ("full_batch_tokens_per_s", "full_batch_")):
            rates = {g: groups[g][conc][key] for g in rivals
                     if groups.get(g, {}).get(conc, {}).get(key)}
            if not rates or not cell.get(key):
                continue
            best = max(rates, key=rates.__getitem__)
            row |= {f"{prefix}best_rival": best,
                    f"{prefix}vs_best_rival": cell[key] / rates[best]}
            passes = f"passes_{key}"
            paired = _paired(cell.get(passes), groups[best][conc].get(passes))
            if paired is not None:
                row[f"{prefix}vs_best_rival_paired"] = paired
            if "plain" in rates:
                row[f"{prefix}vs_plain"] = cell[key] / rates["plain"]
                paired = _paired(cell.get(passes), groups["plain"][conc].get(passes))
                if paired is not None:
                    row[f"{prefix}vs_plain_paired"] = paired
                twin = groups.get(TWIN, {}).get(conc, {}).get(key)
                if twin:  # the same engine as plain: how far apart identical work reads
                    row[f"{prefix}twin_vs_plain"] = twin / rates["plain"]
        hf = groups.get("hf-generate", {}).get(conc)
        if hf:
            row["vs_hf_generate"] = cell["tokens_per_s"] / hf["tokens_per_s"]
        row["schedule_share"] = cell["phase_share"].get("schedule")
        # free of the drift between groups: drafting against this engine's own plain rounds
        row["drafting_excess_share"] = cell.get("drafting_excess_share")
        out[conc] = row
    return out


def _paired(ours: Sequence[float] | None, theirs: Sequence[float] | None) -> float | None:
    """The median over passes of the two groups' ratio within each pass (None with fewer
    than two passes each, or unequal counts). Both groups run a pass's slices minutes apart,
    so a drift of the machine's speed from pass to pass cancels in each pass's ratio; the
    ratio of the two medians can take them from different passes."""
    if not ours or not theirs or len(ours) != len(theirs) or len(ours) < 2 or not all(theirs):
        return None
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))


def format_table(doc: dict[str, Any]) -> str:
    """One row per group and concurrency, with the speed-up over plain at that concurrency."""
    header = (f"{'group':<30}{'conc':>5}{'tok/s':>9}{'x plain':>9}{'full x':>8}{'req tok/s':>11}"
              f"{'tau':>7}{'trunc':>7}{'verif':>7}{'rss MB':>9}  {'match':<12} phase share")
    lines = [header, "-" * len(header)]
    for group, cells in doc["groups"].items():
        variant = group.partition("@")[2]  # against plain of the same sampling variant
        plain = doc["groups"].get("plain" + (f"@{variant}" if variant else ""), {})
        for conc, s in cells.items():
            base = plain.get(conc, {}).get("tokens_per_s") or None
            ratio = f"{s['tokens_per_s'] / base:.2f}" if base else "-"
            full_base = plain.get(conc, {}).get("full_batch_tokens_per_s") or None
            full = s.get("full_batch_tokens_per_s")
            full_ratio = f"{full / full_base:.2f}" if full and full_base else "-"
            fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
            share = " ".join(f"{p[0]}{v * 100:.0f}%" for p, v in s["phase_share"].items())
            match = ("yes" if s["match_plain"] else
                     f"{s['matched_requests']}/{s['requests']}") if s["match_plain"] is not None else "-"
            if s.get("divergence_top2_gap_max") is not None:  # worst first-divergence gap
                match += f" <{s['divergence_top2_gap_max']:.2f}"
            lines.append(f"{group:<30}{conc:>5}{s['tokens_per_s']:>9.1f}{ratio:>9}{full_ratio:>8}"
                         f"{s['per_request_tokens_per_s']:>11.1f}{fmt(s['tau'], '.2f'):>7}"
                         f"{fmt(s['truncation_ratio'], '.2f'):>7}{fmt(s['mean_verified'], '.2f'):>7}"
                         f"{s['peak_rss_mb']:>9.0f}  {match:<12} {share}")
    for base, temps in doc.get("coupled_vs_standard", {}).items():
        for variant, rows in temps.items():
            for conc, r in rows.items():
                fmt = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
                lines.append(f"{base} {variant} c={conc}: tau standard {fmt(r['tau_standard'])}"
                             f" coupled {fmt(r['tau_coupled'])}, tok/s standard "
                             f"{r['tokens_per_s_standard']:.1f} coupled "
                             f"{r['tokens_per_s_coupled']:.1f} "
                             f"({fmt(r['speed_coupled_vs_standard'])}x)")
    for name, rows in doc.get("comparisons", {}).items():
        for conc, row in rows.items():
            parts = [f"{k} {v * 100:+.2f}%" if k == "drafting_excess_share" else
                     f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in row.items() if v is not None]
            lines.append(f"{name} c={conc}: " + ", ".join(parts))
    return "\n".join(lines)


def write_json(doc: dict[str, Any], path: str | None) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(doc, indent=2))
