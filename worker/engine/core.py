"""The synchronous engine core: one ``step()`` is one round over the running batch.

``step()`` reads as the round's phases, each a method over typed records:

- ``_plan`` (admit): newcomers into free KV slots, the decoding rows with their task groups'
  policies (``Policy.for_group``), this round's prefill chunks -> ``_Batch``;
- ``_draft``: decoding requests draft by their groups' policies; scheduled rows only when
  the draft gate (``draft_gate.DraftGate``) says drafting pays; none in a reference round
  (``plain_rounds``) -> ``_Drafts``;
- ``_schedule``: verify lengths (``scheduler.schedule``); a round without drafts skips it;
- ``_verify_round``: ONE batched target forward over every request's pending token plus its
  verified drafts, plus prefill chunks; the acceptance rule per row (greedy; speculative
  sampling; the coupled rule for seeded requests) -> ``_Verified``;
- ``_commit_round``: roll the KV back to the committed length, emit tokens, stop checks,
  count the round -> ``round_stats.RoundStats``;
- ``_end_round``: the gate records what the round cost; the stats go to the metrics exporter
  (``exporter.RoundExporter``) in one place.

A round in which no row drafts is exactly a plain round: the drafter does not run, nothing is
scheduled, the forward carries one token per decoding row.

Invariant per decoding request: the KV cache holds every committed token except the last one
(the *pending* token), and ``hidden`` is the target's final-norm hidden state at the last
cached position (the state that produced the pending token). Drafts follow the pending token.

Thread-safety: ``add``/``cancel``/``set_policy`` only append to an inbox under a lock; the
inbox is applied at the start of the next round, on the thread running ``step()``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from specd.api import metrics as mnames
from specd.api.policy import Policy
from specd.worker.drafters.base import Drafter, DraftRow
from specd.worker.engine import verifier
from specd.worker.engine.api import (
    EngineConfig,
    EngineError,
    EngineStats,
    GenerationRequest,
    SpecStats,
    StreamEvent,
)
from specd.worker.engine.draft_gate import DraftGate, RoundOutcome
from specd.worker.engine.exporter import RoundExporter
from specd.worker.engine.llama import ForwardOutput, LlamaRunner, Row
from specd.worker.engine.metrics import EngineMetrics
from specd.worker.engine.round_stats import PositionCounts, RoundStats
from specd.worker.engine.scheduler import CostTable, OnlineCalibration, schedule

Sink = Callable[[StreamEvent], None]


class _Seq:
    """A request's state inside the engine."""

    def __init__(self, req: GenerationRequest, sink: Sink, eos: set[int], device: torch.device,
                 now: float) -> None:
        self.req = req
        self.id = req.request_id
        self.params = req.params
        self.group = mnames.task_group(req.task_group)
        self.counted = not req.probe  # in the per-request metrics
        self.prompt = list(req.prompt_token_ids)
        self.tokens = list(self.prompt)  # committed; the pending token last once decoding
        self.prefilled = 0
        self.slot: int | None = None
        self.decoding = False
        self.hidden: torch.Tensor | None = None
        # residual stream after the drafter's feature layers at the same position [n, H]
        self.layers: torch.Tensor | None = None
        # hidden states of committed positions not yet handed to a context drafter
        self.context: list[torch.Tensor] = []
        self.output: list[int] = []
        self.spec = SpecStats()
        # seeded sampling: every random choice is keyed by (seed, output position) (the
        # coupled rule, ``verifier.verify_coupled``); unseeded: the engine's generator
        self.coupled = self.params.seed is not None and not self.params.greedy
        self.eos = set() if self.params.ignore_eos else eos
        self.sink = sink
        self.text = ""  # text sent so far
        self.finish_reason: str | None = None
        self.t_submit = now
        self.t_first: float | None = None


@dataclass
class _Batch:
    """The round's rows: decoding requests (with their groups' policies), prefill chunks."""

    decode: list[_Seq]
    policies: list[Policy]
    chunks: list[tuple[_Seq, int]]
    reference: bool  # a reference round: plain for everyone (``plain_rounds``)

    @property
    def base_tokens(self) -> int:
        """Tokens the forward carries before any draft."""
        return len(self.decode) + sum(n for _, n in self.chunks)

    @property
    def rows(self) -> int:
        return len(self.decode) + len(self.chunks)

    @property
    def measured(self) -> bool:
        """No prefill chunk: the round's cost is the decoding rows' alone."""
        return not self.chunks


@dataclass
class _Drafts:
    """Per decoding row: drafted tokens, calibrated confidences, draft distributions."""

    tokens: list[list[int]]
    confs: list[list[float]]
    qs: list[torch.Tensor | None]
    raw: dict[int, tuple[OnlineCalibration, list[float]]] = field(default_factory=dict)
    ran: bool = False  # the drafter ran (the round's kind: speculative)
    gate: bool | None = None  # the draft gate's choice for the scheduled rows (None: not asked)


@dataclass
class _Verified:
    entries: list[tuple[_Seq, list[int], torch.Tensor | None, int]]  # row, verified, q, start
    results: list[tuple[int, int]]  # (accepted drafts, next token) per entry
    out: ForwardOutput
    kv_before: list[int]


class _Clock:
    """Round timings: ``phases`` (the exported ones) and ``parts`` (finer, summing to them)."""

    def __init__(self) -> None:
        self.t0 = self._phase = self._part = time.perf_counter()
        self.phases: dict[str, float] = {}
        self.parts: dict[str, float] = {}

    def mark_part(self, name: str) -> None:
        now = time.perf_counter()
        self.parts[name] = self.parts.get(name, 0.0) + now - self._part
        self._part = now

    def mark(self, phase: str, part: str | None = None) -> None:
        """End ``phase``; what its parts did not claim goes to ``part`` (default: its name)."""
        self.mark_part(part or phase)
        self.phases[phase] = self._part - self._phase
        self._phase = self._part

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


class EngineCore:
    def __init__(self, runner: LlamaRunner, drafter: Drafter, tokenizer: Any,
                 config: EngineConfig, policy: Policy, metrics: EngineMetrics,
                 costs: CostTable | None = None, eos_token_ids: set[int] | None = None) -> None:
        self.runner = runner
        self.drafter = drafter
        self.tokenizer = tokenizer
        self.config = config
        self.policy = policy
        self.metrics = metrics
        self.cache = runner.new_cache(config.max_slots, config.max_context)
        self._costs = costs or CostTable.flat()
        self.device = runner.device
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        if eos_token_ids is None:
            eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
            eos_token_ids = {eos} if eos is not None else set()
        self.eos = set(eos_token_ids)
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self._inbox: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self.rounds = 0
        self.last_round: RoundStats | None = None
        # called with every round's stats on the engine's thread (benchmarks keep them)
        self.round_listeners: list[Callable[[RoundStats], None]] = []
        # swappable: tests inject a wrong rule
        self.verify_sampling = verifier.verify_sampling
        self.verify_coupled = verifier.verify_coupled
        self.gate = DraftGate(self._costs)  # scheduled mode: does the round draft at all
        # one per proposal source: a combined drafter's sources are calibrated apart
        self.online_calibration: dict[str, OnlineCalibration] = {}
        self._group_policies: dict[str, Policy] = {}  # Policy.for_group, per policy
        self._plain_credit = 0.0  # reference rounds owed (policy.plain_rounds)
        self.exporter = RoundExporter(metrics, drafter.name, policy)

    # -- inbox (any thread) ----------------------------------------------------------------
    def add(self, req: GenerationRequest, sink: Sink) -> None:
        limit = self.config.max_context
        if len(req.prompt_token_ids) + req.params.max_tokens > limit:
            raise EngineError(f"prompt ({len(req.prompt_token_ids)} tokens) + max_tokens "
                              f"({req.params.max_tokens}) exceeds the engine's context ({limit})")
        vocab = self.runner.vocab_size if self.runner.vocab_size else None
        if vocab and (min(req.prompt_token_ids) < 0 or max(req.prompt_token_ids) >= vocab):
            raise EngineError(f"prompt token ids must be in [0, {vocab})")
        seq = _Seq(req, sink, self.eos if req.params.eos_token_ids is None
                   else set(req.params.eos_token_ids), self.device, time.perf_counter())
        with self._lock:
            self._inbox.append(("add", seq))

    def cancel(self, request_id: str) -> None:
        with self._lock:
            self._inbox.append(("cancel", request_id))

    def set_policy(self, policy: Policy) -> None:
        with self._lock:
            self._inbox.append(("policy", policy))

    @property
    def costs(self) -> CostTable:
        """The target's step-cost table (``cost.measure_costs``), which the scheduler and
        the draft gate price with."""
        return self._costs

    @costs.setter
    def costs(self, table: CostTable) -> None:
        # one table for both: a gate left pricing with the start-up flat table finds that
        # drafting always pays, and drafts in rounds the scheduler then verifies nothing of
        self._costs = table
        self.gate.costs = table
        self.gate.forget_predictions()

    @property
    def phase_seconds(self) -> dict[str, float]:
        """Round time by phase since start (draft, schedule, verify, commit)."""
        return self.exporter.phase_seconds

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self._inbox)

    def stats(self, ready: bool = True) -> EngineStats:
        return EngineStats(queue_depth=len(self.waiting) + sum(1 for k, _ in self._inbox if k == "add"),
                           running=len(self.running), kv_used_tokens=self.cache.used_tokens,
                           kv_capacity_tokens=self.cache.capacity_tokens, rounds=self.rounds,
                           drafter=self.drafter.name, policy_mode=self.policy.mode,
                           policy_version=self.policy.version(), ready=ready)

    # -- the round ---------------------------------------------------------------------------
    def step(self) -> bool:
        """Run one round. Returns False when there was nothing to do."""
        self._apply_inbox()
        self._admit()
        if not self.running:
            self.gate.idle()
            self._gauges()
            return False
        clock = _Clock()
        batch = self._plan()
        drafts = self._draft(batch, clock)
        clock.mark("draft")
        lengths = self._schedule(batch, drafts, overhead=clock.elapsed())
        clock.mark("schedule")
        verified = self._verify_round(batch, drafts, lengths, clock)
        clock.mark("verify", part="accept")
        stats = self._commit_round(batch, drafts, verified)
        clock.mark("commit")
        stats.phases, stats.parts = clock.phases, clock.parts
        self._end_round(batch, drafts, stats, verified)
        return True

    def _plan(self) -> _Batch:
        """Admit: the decoding rows with their groups' policies, and this round's prefill
        chunks (a whole prompt when nothing decodes, else one chunk per round)."""
        policy = self.policy
        decode = [s for s in self.running if s.decoding]
        budget = (policy.max_batch_tokens if not decode else
                  min(self.config.prefill_chunk, max(policy.max_batch_tokens - len(decode), 1)))
        chunks: list[tuple[_Seq, int]] = []
        for s in self.running:
            if s.decoding:
                continue
            n = min(len(s.prompt) - s.prefilled, budget)
            if n <= 0:
                break
            chunks.append((s, n))
            budget -= n
        # reference rounds are drawn from rounds without a prefill chunk, the only rounds the
        # decode counters compare: under continuous arrivals nearly every round carries a
        # chunk, and a share of all rounds left the tuner one clean plain round a window
        return _Batch(decode, [self._group_policy(s.group) for s in decode], chunks,
                      reference=bool(decode) and not chunks and self._reference_round(policy))

    def _draft(self, batch: _Batch, clock: _Clock) -> _Drafts:
        """Each request by its task group's policy (plain groups draft nothing); scheduled
        rows draft only when the gate says drafting pays (else, for them, a plain round)."""
        n = len(batch.decode)
        drafts = _Drafts([[] for _ in range(n)], [[] for _ in range(n)], [None] * n)
        if self.drafter.name == "none" or batch.reference:
            return drafts
        drafting = [i for i, p in enumerate(batch.policies) if p.mode != "plain"]
        gated = [i for i in drafting if batch.policies[i].mode == "scheduled"]
        if gated:
            drafts.gate = self.gate.choose(
                self.policy, [batch.policies[i] for i in gated], batch.base_tokens,
                rows=batch.rows, measured=batch.measured).draft
            clock.mark_part("gate")
            if not drafts.gate:
                drafting = [i for i in drafting if batch.policies[i].mode != "scheduled"]
        rows, idx = [], []
        with_context = self.drafter.needs_context
        for i in drafting:
            s, p = batch.decode[i], batch.policies[i]
            want_k = p.k_max if p.mode == "scheduled" else p.fixed_length
            k = min(want_k, self.drafter.max_k, s.params.max_tokens - len(s.output) - 1)
            if k > 0:
                ctx = torch.cat(s.context) if with_context else None
                rows.append(DraftRow(s.id, s.tokens, k, s.params.temperature,
                                     s.params.seed if s.coupled else None, ctx,
                                     position=len(s.output)))
                idx.append(i)
        if not rows:
            return drafts
        drafts.ran = True
        td = time.perf_counter()
        hidden = (torch.stack([batch.decode[i].hidden for i in idx])
                  if self.drafter.needs_hidden else None)
        layers = (torch.stack([batch.decode[i].layers for i in idx])
                  if self.drafter.feature_layers else None)
        prop = self.drafter.propose(rows, hidden, self.generator, layers)
        if with_context:  # the drafter has them now
            for i in idx:
                batch.decode[i].context = []
        for j, i in enumerate(idx):
            source = prop.sources[j] if prop.sources else self.drafter.name
            cal = self.online_calibration.get(source)
            if cal is None:
                cal = self.online_calibration[source] = OnlineCalibration()
            drafts.tokens[i] = prop.tokens[j]
            drafts.confs[i] = cal.apply(prop.confidence[j])
            drafts.qs[i] = prop.q[j] if prop.q else None
            drafts.raw[i] = (cal, prop.confidence[j])
        self.gate.learn(len(drafting), [drafts.confs[i] for i in idx], time.perf_counter() - td)
        return drafts

    def _schedule(self, batch: _Batch, drafts: _Drafts, overhead: float) -> list[int]:
        """Verify lengths; a round with no draft is a plain round (nothing to schedule)."""
        if not drafts.ran:
            return [0] * len(batch.decode)
        # the round so far (drafting) is part of its time whatever gets verified
        return schedule(self.policy, drafts.confs, batch.base_tokens,
                        self.costs.for_rows(batch.rows), overhead=overhead,
                        rows=batch.policies).lengths

    def _verify_round(self, batch: _Batch, drafts: _Drafts, lengths: list[int],
                      clock: _Clock) -> _Verified:
        """One target forward over every request's pending token and its verified drafts,
        plus the prefill chunks; then the acceptance rule per row."""
        rows = []
        kv_before = []
        for s, v, d in zip(batch.decode, lengths, drafts.tokens, strict=True):
            kv_before.append(self.cache.lengths[s.slot])
            rows.append(Row(s.slot, [s.tokens[-1], *d[:v]], "all"))
        finals = []
        for s, n in batch.chunks:
            final = s.prefilled + n == len(s.prompt)
            rows.append(Row(s.slot, s.prompt[s.prefilled: s.prefilled + n],
                            "last" if final else "none"))
            s.prefilled += n
            if final:
                finals.append(s)
        with_context = self.drafter.needs_context
        out = self.runner.forward(self.cache, rows, all_hidden=with_context,
                                  layers=self.drafter.feature_layers)
        clock.mark_part("forward")
        if with_context:  # prefill chunks: every prompt position is committed
            for j, (s, n) in enumerate(batch.chunks):
                at = out.flat_starts[len(batch.decode) + j]
                s.context.append(out.all_hidden[at: at + n].clone())
        # rows to verify: decoding requests, then prefills that just finished (no drafts)
        entries = [(s, d[:v], drafts.qs[i], out.starts[i]) for i, (s, v, d) in
                   enumerate(zip(batch.decode, lengths, drafts.tokens, strict=True))]
        n_dec = len(batch.decode)
        entries += [(s, [], None, out.starts[n_dec + j])
                    for j, (s, _) in enumerate(batch.chunks) if s in finals]
        return _Verified(entries, self._verify(entries, out.logits), out, kv_before)

    def _commit_round(self, batch: _Batch, drafts: _Drafts, v: _Verified) -> RoundStats:
        """Roll each KV back to its committed length, emit tokens, count the round."""
        stats = RoundStats("speculative" if drafts.ran else "plain", len(batch.decode),
                           prefill_tokens=sum(n for _, n in batch.chunks))
        with_context = self.drafter.needs_context
        out = v.out
        n_dec = len(batch.decode)
        for e, (s, d, _q, start) in enumerate(v.entries):
            accepted, nxt = v.results[e]
            s.hidden = out.hidden[start + accepted]
            if out.layer_hidden is not None:
                s.layers = out.layer_hidden[start + accepted]
            if e < n_dec:
                if with_context:  # the pending token and the accepted drafts
                    at = out.flat_starts[e]
                    s.context.append(out.all_hidden[at: at + accepted + 1].clone())
                self.cache.truncate(s.slot, v.kv_before[e] + 1 + accepted)
                drafted = len(drafts.tokens[e])
                s.spec.rounds += 1
                s.spec.drafted += drafted
                s.spec.verified += len(d)
                s.spec.accepted += accepted
                s.spec.emitted += accepted + 1
                stats.add_request(s.group, drafted, len(d), accepted, s.counted)
                if d:
                    stats.positions.setdefault(s.group, PositionCounts()).add(
                        drafts.confs[e], batch.policies[e].calibration, len(d), accepted)
                    if e in drafts.raw:
                        cal, raw = drafts.raw[e]
                        cal.update(raw, len(d), accepted)
            else:
                s.decoding = True
            self._commit(s, [*d[:accepted], nxt])
        return stats

    def _end_round(self, batch: _Batch, drafts: _Drafts, stats: RoundStats,
                   v: _Verified) -> None:
        self.rounds += 1
        # rounds of one kind (every row scheduled, no prefill): their costs compare
        if (batch.measured and batch.decode and self.drafter.name != "none"
                and all(p.mode == "scheduled" for p in batch.policies)):
            committed = sum(v.results[e][0] + 1 for e in range(len(batch.decode)))
            self.gate.record(RoundOutcome(len(batch.decode), bool(drafts.gate), stats.seconds,
                                          committed, stats.verified))
        self.exporter.export(stats)
        self.last_round = stats
        for listener in self.round_listeners:
            listener(stats)
        self._gauges()

    # -- reference rounds ------------------------------------------------------------------
    def _reference_round(self, policy: Policy) -> bool:
        """Every 1/plain_rounds-th decode round without a prefill chunk runs plain for
        everyone: what true plain decoding does on this worker at today's batch sizes, for
        the tuner to compare."""
        if policy.plain_rounds <= 0:
            return False
        self._plain_credit += policy.plain_rounds
        if self._plain_credit < 1.0:
            return False
        self._plain_credit -= 1.0
        return True

    # -- verification ------------------------------------------------------------------------
    def _verify(self, entries: list, logits: torch.Tensor | None) -> list[tuple[int, int]]:
        results: list[tuple[int, int]] = [(0, 0)] * len(entries)
        if not entries:
            return results
        greedy = [e for e, ent in enumerate(entries) if ent[0].params.greedy]
        coupled = [e for e, ent in enumerate(entries) if ent[0].coupled]
        sampled = [e for e, ent in enumerate(entries)
                   if not ent[0].params.greedy and not ent[0].coupled]
        if greedy:
            rows = torch.cat([torch.arange(entries[e][3], entries[e][3] + len(entries[e][1]) + 1)
                              for e in greedy]).to(self.device)
            am = logits[rows].argmax(-1).tolist()
            pos = 0
            for e in greedy:
                d = entries[e][1]
                results[e] = verifier.accept_greedy(d, am[pos: pos + len(d) + 1])
                pos += len(d) + 1
        if coupled:
            p, draft, lengths = self._target_probs(entries, coupled, logits)
            seeds = [entries[e][0].params.seed for e in coupled]
            positions = [len(entries[e][0].output) for e in coupled]
            accepted, nxt = self.verify_coupled(p, seeds, positions, draft, lengths)
            for j, e in enumerate(coupled):
                results[e] = (int(accepted[j]), int(nxt[j]))
        if sampled:
            self._verify_sampled(entries, sampled, logits, results)
        return results

    def _target_probs(self, entries: list, idx: list[int], logits: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(p [B, K+1, V] processed target distributions, draft [B, K], lengths [B]) of the
        rows ``idx``; positions past a row's length repeat its last one (padding)."""
        dev = self.device
        k = max(len(entries[e][1]) for e in idx)
        b = len(idx)
        vocab = logits.shape[-1]
        gather = torch.zeros(b, k + 1, dtype=torch.long)
        temps, topk, topp = [], [], []
        draft = torch.zeros(b, k, dtype=torch.long)
        lengths = torch.zeros(b, dtype=torch.long)
        for j, e in enumerate(idx):
            s, d, _qd, start = entries[e]
            n = len(d)
            gather[j] = start + torch.arange(k + 1).clamp(max=n)
            lengths[j] = n
            if n:
                draft[j, :n] = torch.tensor(d)
            temps.append(s.params.temperature)
            topk.append(s.params.top_k)
            topp.append(s.params.top_p)
        flat = logits[gather.view(-1).to(dev)]
        rep = k + 1
        p = verifier.target_probs(
            flat,
            torch.tensor(temps, device=dev).repeat_interleave(rep),
            torch.tensor(topk, device=dev).repeat_interleave(rep),
            torch.tensor(topp, device=dev, dtype=torch.float32).repeat_interleave(rep),
        ).view(b, rep, vocab)
        return p, draft.to(dev), lengths.to(dev)

    def _verify_sampled(self, entries: list, idx: list[int], logits: torch.Tensor,
                        results: list) -> None:
        """The standard rule (unseeded rows), uniforms from the engine's generator."""
        dev = self.device
        p, draft, lengths = self._target_probs(entries, idx, logits)
        b, k = draft.shape
        vocab = logits.shape[-1]
        q = torch.zeros(b, k, vocab, device=dev, dtype=torch.float32)
        u_acc = torch.zeros(b, k, device=dev)
        u_smp = torch.zeros(b, device=dev)
        for j, e in enumerate(idx):
            _s, d, qd, _start = entries[e]
            n = len(d)
            if n:
                if qd is None:  # deterministic draft: q is one-hot at the drafted token
                    q[j, torch.arange(n), torch.tensor(d)] = 1.0
                else:
                    q[j, :n] = qd[:n].float()
            u = torch.rand(n + 1, generator=self.generator, device=dev)
            u_acc[j, :n] = u[:n]
            u_smp[j] = u[n]
        accepted, nxt = self.verify_sampling(p, q, draft, lengths, u_acc, u_smp)
        for j, e in enumerate(idx):
            results[e] = (int(accepted[j]), int(nxt[j]))

    # -- commit ------------------------------------------------------------------------------
    def _commit(self, s: _Seq, new: list[int]) -> None:
        now = time.perf_counter()
        if s.t_first is None:
            s.t_first = now
            if s.counted:
                self.metrics.ttft.labels(s.group).observe(now - s.t_submit)
        p = s.params
        emitted: list[int] = []
        reason = None
        for tok in new:
            s.output.append(tok)
            s.tokens.append(tok)
            emitted.append(tok)
            if tok in s.eos:
                reason = "stop"
                break
            if p.stop and self._stop_hit(s):
                reason = "stop"
                break
            if len(s.output) >= p.max_tokens:
                reason = "length"
                break
        text = self._text_delta(s, final=reason is not None)
        if reason is not None:
            self._finish(s, reason, emitted, text)
        else:
            s.sink(StreamEvent(s.id, emitted, text, spec=_copy(s.spec),
                               prompt_tokens=len(s.prompt), completion_tokens=len(s.output)))

    def _decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _stop_hit(self, s: _Seq) -> bool:
        text = self._decode(s.output)
        longest = max(len(x) for x in s.params.stop)
        window = text[max(0, len(s.text) - longest):]
        return any(x in window for x in s.params.stop)

    def _text_delta(self, s: _Seq, final: bool) -> str:
        text = self._decode(s.output)
        if s.params.stop:
            cut = [text.find(x) for x in s.params.stop]
            cut = [c for c in cut if c >= 0]
            if cut:
                text = text[: min(cut)]
            elif not final:  # hold back what could be the start of a stop string
                hold = max(len(x) for x in s.params.stop) - 1
                text = text[: max(len(s.text), len(text) - hold)]
        if not final and text.endswith("\ufffd"):  # an incomplete UTF-8 sequence
            text = text[:-1]
        if not text.startswith(s.text):  # detokenisation changed earlier text: send nothing new
            return ""
        delta = text[len(s.text):]
        s.text = text
        return delta

    def _finish(self, s: _Seq, reason: str, emitted: list[int], text: str,
                error: str | None = None) -> None:
        s.finish_reason = reason
        if s.slot is not None:
            self.cache.release(s.slot)
            s.slot = None
        self.drafter.release(s.id)
        if s in self.running:
            self.running.remove(s)
        now = time.perf_counter()
        outcome = {"stop": "finished", "length": "finished"}.get(reason, reason)
        if s.counted:
            self.metrics.requests.labels(outcome, s.group).inc()
            self.metrics.latency.labels(s.group).observe(now - s.t_submit)
            if s.t_first is not None and len(s.output) > 1:
                self.metrics.tpot.labels(s.group).observe(
                    (now - s.t_first) / (len(s.output) - 1))
        s.sink(StreamEvent(s.id, emitted, text, finished=True, finish_reason=reason,
                           spec=_copy(s.spec), prompt_tokens=len(s.prompt),
                           completion_tokens=len(s.output), error=error))

    # -- admission, inbox, metrics -----------------------------------------------------------
    def _apply_inbox(self) -> None:
        with self._lock:
            inbox, self._inbox = self._inbox, []
        for kind, item in inbox:
            if kind == "add":
                self.waiting.append(item)
            elif kind == "cancel":
                self._cancel(item)
            elif kind == "policy":
                self.policy = item
                self.gate.forget_predictions()
                self._group_policies.clear()
                self.exporter.set_policy(item)

    def _cancel(self, request_id: str) -> None:
        for s in list(self.waiting):
            if s.id == request_id:
                self.waiting.remove(s)
                self._finish(s, "cancelled", [], "")
                return
        for s in list(self.running):
            if s.id == request_id:
                self._finish(s, "cancelled", [], "")
                return

    def fail_all(self, error: str) -> None:
        """A round raised: finish every request with an error instead of hanging them."""
        for s in list(self.running) + list(self.waiting):
            if s in self.waiting:
                self.waiting.remove(s)
            self._finish(s, "error", [], "", error=error)

    def cancel_all(self) -> None:
        self._apply_inbox()
        for s in list(self.waiting) + list(self.running):
            self._cancel(s.id)

    def _admit(self) -> None:
        # finished requests left holes: close them before newcomers take the lowest slots
        moves = self.cache.compact()
        if moves:
            for s in self.running:
                s.slot = moves.get(s.slot, s.slot)  # type: ignore[arg-type]
        while self.waiting and self.cache.free_slots:
            s = self.waiting.popleft()
            s.slot = self.cache.allocate()
            self.running.append(s)
        self._gauges()

    def _gauges(self) -> None:
        self.metrics.queue_depth.set(len(self.waiting))
        self.metrics.running.set(len(self.running))
        self.metrics.kv_usage.set(self.cache.usage())

    def _group_policy(self, group: str) -> Policy:
        policy = self._group_policies.get(group)
        if policy is None:
            policy = self._group_policies[group] = self.policy.for_group(group)
        return policy


def _copy(spec: SpecStats) -> SpecStats:
    return SpecStats(spec.rounds, spec.drafted, spec.verified, spec.accepted, spec.emitted)
