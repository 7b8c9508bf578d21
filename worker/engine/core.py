"""The synchronous engine core: one ``step()`` is one round over the running batch.

Round: admit newcomers into free KV slots -> draft (decoding requests, each by its task
group's policy, ``Policy.for_group``; none in a reference round, ``plain_rounds``) ->
schedule verify lengths -> ONE batched target forward over every request's pending token plus its
verified drafts, plus prefill chunks of newcomers -> verify (greedy; speculative sampling,
the coupled rule for seeded requests) -> commit (roll the KV back to the committed length,
emit tokens, stop checks).

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
from specd.worker.engine.draft_gate import DraftGate, RoundOutcome, bucket
from specd.worker.engine.llama import LlamaRunner, Row
from specd.worker.engine.metrics import EngineMetrics
from specd.worker.engine.scheduler import CostTable, OnlineCalibration, calibrate, schedule

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
        self.costs = costs or CostTable.flat()
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
        self.phase_seconds = {p: 0.0 for p in mnames.PHASES}
        # swappable: tests inject a wrong rule
        self.verify_sampling = verifier.verify_sampling
        self.verify_coupled = verifier.verify_coupled
        self.gate = DraftGate(self.costs)  # scheduled mode: does the round draft at all
        # one per proposal source: a combined drafter's sources are calibrated apart
        self.online_calibration: dict[str, OnlineCalibration] = {}
        self._group_policies: dict[str, Policy] = {}  # Policy.for_group, per policy
        self._group_labels: dict[str, tuple[str, str, str, str]] = {}
        self._plain_credit = 0.0  # reference rounds owed (policy.plain_rounds)
        self._set_policy_labels()

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
            self._gauges()
            return False
        policy = self.policy
        t0 = time.perf_counter()
        decode = [s for s in self.running if s.decoding]
        prefill = [s for s in self.running if not s.decoding]

        # prefill allowance: a whole prompt when nothing decodes, else one chunk per round
        budget = (policy.max_batch_tokens if not decode else
                  min(self.config.prefill_chunk, max(policy.max_batch_tokens - len(decode), 1)))
        chunks: list[tuple[_Seq, int]] = []
        for s in prefill:
            n = min(len(s.prompt) - s.prefilled, budget)
            if n <= 0:
                break
            chunks.append((s, n))
            budget -= n
        base_tokens = len(decode) + sum(n for _, n in chunks)

        # draft: each request by its task group's policy (plain groups draft nothing);
        # scheduled rows skip the drafter when a plain round is predicted to win
        with_context = self.drafter.needs_context  # the drafter reads every committed position
        policies = [self._group_policy(s.group) for s in decode]
        reference = bool(decode) and self._reference_round(policy)
        drafting = ([] if self.drafter.name == "none" or reference else
                    [i for i, p in enumerate(policies) if p.mode != "plain"])
        gated = [i for i in drafting if policies[i].mode == "scheduled"]
        all_scheduled = (bool(decode) and self.drafter.name != "none"
                         and all(p.mode == "scheduled" for p in policies))
        scheduled_draft = bool(gated) and self.gate.choose(
            policy, [policies[i] for i in gated], base_tokens, rows=len(decode) + len(chunks),
            measured=not chunks).draft
        if not scheduled_draft:
            drafting = [i for i in drafting if policies[i].mode != "scheduled"]
        speculate = bool(drafting)
        drafts: list[list[int]] = [[] for _ in decode]
        confs: list[list[float]] = [[] for _ in decode]
        qs: list[torch.Tensor | None] = [None] * len(decode)
        raw_conf: dict[int, tuple[OnlineCalibration, list[float]]] = {}
        ran_drafter = False  # the round paid for drafting (its kind: speculative)
        if speculate:
            rows, idx = [], []
            for i in drafting:
                s, p = decode[i], policies[i]
                want_k = p.k_max if p.mode == "scheduled" else p.fixed_length
                k = min(want_k, self.drafter.max_k, s.params.max_tokens - len(s.output) - 1)
                if k > 0:
                    ctx = torch.cat(s.context) if with_context else None
                    rows.append(DraftRow(s.id, s.tokens, k, s.params.temperature,
                                         s.params.seed if s.coupled else None, ctx,
                                         position=len(s.output)))
                    idx.append(i)
            if rows:
                ran_drafter = True
                td = time.perf_counter()
                hidden = (torch.stack([decode[i].hidden for i in idx])
                          if self.drafter.needs_hidden else None)
                layers = (torch.stack([decode[i].layers for i in idx])
                          if self.drafter.feature_layers else None)
                prop = self.drafter.propose(rows, hidden, self.generator, layers)
                if with_context:  # the drafter has them now
                    for i in idx:
                        decode[i].context = []
                for j, i in enumerate(idx):
                    source = prop.sources[j] if prop.sources else self.drafter.name
                    cal = self.online_calibration.get(source)
                    if cal is None:
                        cal = self.online_calibration[source] = OnlineCalibration()
                    drafts[i] = prop.tokens[j]
                    confs[i] = cal.apply(prop.confidence[j])
                    qs[i] = prop.q[j] if prop.q else None
                    raw_conf[i] = (cal, prop.confidence[j])
                self.gate.learn(len(drafting), [confs[i] for i in idx],
                                time.perf_counter() - td)
        t1 = time.perf_counter()

        # schedule
        # the round so far (drafting) is part of its time whatever gets verified
        sched = schedule(policy, confs, base_tokens, self.costs.for_rows(len(decode) + len(chunks)),
                         overhead=t1 - t0, rows=policies)
        lengths = sched.lengths
        t2 = time.perf_counter()

        # verify: one forward for everyone
        rows = []
        kv_before = []
        for s, v, d in zip(decode, lengths, drafts, strict=True):
            kv_before.append(self.cache.lengths[s.slot])
            rows.append(Row(s.slot, [s.tokens[-1], *d[:v]], "all"))
        finals = []
        for s, n in chunks:
            final = s.prefilled + n == len(s.prompt)
            rows.append(Row(s.slot, s.prompt[s.prefilled: s.prefilled + n], "last" if final else "none"))
            s.prefilled += n
            if final:
                finals.append(s)
        out = self.runner.forward(self.cache, rows, all_hidden=with_context,
                                  layers=self.drafter.feature_layers)
        if with_context:  # prefill chunks: every prompt position is committed
            for j, (s, n) in enumerate(chunks):
                at = out.flat_starts[len(decode) + j]
                s.context.append(out.all_hidden[at: at + n].clone())
        # rows to verify: decoding requests, then prefills that just finished (no drafts)
        entries = [(s, d[:v], qs[i], out.starts[i]) for i, (s, v, d) in
                   enumerate(zip(decode, lengths, drafts, strict=True))]
        n_dec = len(decode)
        fin_i = [n_dec + j for j, (s, _) in enumerate(chunks) if s in finals]
        entries += [(chunks[i - n_dec][0], [], None, out.starts[i]) for i in fin_i]
        results = self._verify(entries, out.logits)
        t3 = time.perf_counter()

        # commit
        # per group: [verified, reached, accepted, predicted] by draft position (0-based)
        by_pos: dict[str, list[list[float]]] = {}
        group_counts: dict[str, list[int]] = {}
        for e, (s, d, _q, start) in enumerate(entries):
            accepted, nxt = results[e]
            s.hidden = out.hidden[start + accepted]
            if out.layer_hidden is not None:
                s.layers = out.layer_hidden[start + accepted]
            if e < n_dec and with_context:  # the pending token and the accepted drafts
                at = out.flat_starts[e]
                s.context.append(out.all_hidden[at: at + accepted + 1].clone())
            if e < n_dec:
                self.cache.truncate(s.slot, kv_before[e] + 1 + accepted)
                s.spec.rounds += 1
                s.spec.drafted += len(drafts[e])
                s.spec.verified += len(d)
                s.spec.accepted += accepted
                s.spec.emitted += accepted + 1
                c = group_counts.setdefault(s.group, [0, 0, 0, 0, 0])
                c[0] += len(drafts[e])
                c[1] += len(d)
                c[2] += accepted
                c[3] += accepted + 1
                c[4] += 1
                if d:
                    self._count_positions(by_pos, s.group, confs[e], policies[e], len(d),
                                          accepted)
                if e in raw_conf and d:
                    cal, raw = raw_conf[e]
                    cal.update(raw, len(d), accepted)
                self._hist(s, len(d), accepted)
            else:
                s.decoding = True
            self._commit(s, [*d[:accepted], nxt])
        t4 = time.perf_counter()

        self.rounds += 1
        if all_scheduled and not chunks:  # rounds of one kind: their costs compare
            self.gate.record(RoundOutcome(len(decode), scheduled_draft, t4 - t0,
                                          sum(results[e][0] + 1 for e in range(n_dec))))
        self._round_metrics((t1 - t0, t2 - t1, t3 - t2, t4 - t3), group_counts, by_pos,
                            sum(1 for x in lengths if x > 0),
                            "speculative" if ran_drafter else "plain", bucket(n_dec))
        return True

    # -- reference rounds ------------------------------------------------------------------
    def _reference_round(self, policy: Policy) -> bool:
        """Every 1/plain_rounds-th decode round runs plain for everyone: what true plain
        decoding does on this worker at today's batch sizes, for the tuner to compare."""
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
                self._group_labels.clear()
                self._set_policy_labels()

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
        while self.waiting and self.cache.free_slots:
            s = self.waiting.popleft()
            s.slot = self.cache.allocate()
            self.running.append(s)
        self._gauges()

    def _gauges(self) -> None:
        self.metrics.queue_depth.set(len(self.waiting))
        self.metrics.running.set(len(self.running))
        self.metrics.kv_usage.set(self.cache.usage())

    def _set_policy_labels(self) -> None:
        labels = (self.drafter.name, self.policy.mode, self.policy.version())
        self._labels = labels
        self.metrics.policy_info.clear()
        self.metrics.policy_info.labels(self.policy.mode, labels[2], self.drafter.name).set(1)
        m = self.metrics
        self._phase = {p: m.phase.labels(*labels, p) for p in mnames.PHASES}
        self._rounds_c = m.rounds.labels(*labels)
        self._vlen = m.verify_length.labels(*labels)
        self._vreq = m.verified_requests.labels(*labels)

    def _group_policy(self, group: str) -> Policy:
        policy = self._group_policies.get(group)
        if policy is None:
            policy = self._group_policies[group] = self.policy.for_group(group)
        return policy

    def _labels_of(self, group: str) -> tuple[str, str, str, str]:
        """(drafter, the group's own mode, policy version, group): per-group series."""
        labels = self._group_labels.get(group)
        if labels is None:
            labels = self._group_labels[group] = (
                self._labels[0], self._group_policy(group).mode, self._labels[2], group)
        return labels

    def _hist(self, s: _Seq, verified: int, accepted: int) -> None:
        self._vlen.observe(verified)
        if s.counted:
            self.metrics.acceptance_length.labels(*self._labels_of(s.group)).observe(accepted + 1)

    @staticmethod
    def _count_positions(by_pos: dict[str, list[list[float]]], group: str, conf: list[float],
                         policy: Policy, verified: int, accepted: int) -> None:
        """Position i was verified; reached: verified with every draft before it accepted
        (where conditional acceptance and the predicted confidence are compared)."""
        rows = by_pos.setdefault(group, [[], [], [], []])
        while len(rows[0]) < verified:
            for r in rows:
                r.append(0.0)
        predicted = calibrate(conf[:verified], policy.calibration)
        for i in range(verified):
            rows[0][i] += 1
        for i in range(min(accepted + 1, verified)):
            rows[1][i] += 1
            rows[3][i] += predicted[i]
        for i in range(accepted):
            rows[2][i] += 1

    def _round_metrics(self, phases: tuple[float, ...], group_counts: dict[str, list[int]],
                       by_pos: dict[str, list[list[float]]], verified_requests: int,
                       kind: str, batch: int) -> None:
        m = self.metrics
        seconds = sum(phases)
        for name, sec in zip(mnames.PHASES, phases, strict=True):
            self._phase[name].observe(sec)
            self.phase_seconds[name] += sec
        self._rounds_c.inc()
        if verified_requests:
            self._vreq.inc(verified_requests)
        for group, (dr, ve, ac, em, rows) in group_counts.items():
            lab = self._labels_of(group)
            kind_labels = (group, lab[1], kind, str(batch))
            m.decode_seconds.labels(*kind_labels).inc(seconds * rows)
            m.decode_tokens.labels(*kind_labels).inc(em)
            if dr:
                m.drafted.labels(*lab).inc(dr)
                m.truncated.labels(*lab).inc(dr - ve)
            if ve:
                m.verified.labels(*lab).inc(ve)
            if ac:
                m.accepted.labels(*lab).inc(ac)
            m.emitted.labels(*lab).inc(em)
        for group, (verified, reached, accepted, predicted) in by_pos.items():
            lab = self._labels_of(group)
            for i, n in enumerate(verified):
                position = str(i + 1)
                m.verified_pos.labels(*lab, position).inc(n)
                if reached[i]:
                    m.reached_pos.labels(*lab, position).inc(reached[i])
                    m.predicted_pos.labels(*lab, position).inc(predicted[i])
                if accepted[i]:
                    m.accepted_pos.labels(*lab, position).inc(accepted[i])
        self._gauges()


def _copy(spec: SpecStats) -> SpecStats:
    return SpecStats(spec.rounds, spec.drafted, spec.verified, spec.accepted, spec.emitted)
