"""``specd bench rounds``: where a round's time goes, per group, side by side in one run.

Each group's engine runs the same prompts at one concurrency, the groups taking turns pass by
pass (in a balanced order, ``run_order``), or with ``lockstep`` round by round: then each
round follows another engine's round on the same thread (its caches hold that engine's state),
so its milliseconds compare between the groups of the run, not with a pass-by-pass run's or a
server's. Every round's ``RoundStats`` is kept; the report
compares rounds of the same shape: full-batch decode rounds (``concurrency`` decoding rows, no prefill chunk in
the forward). For each group: the mean milliseconds of each part (gate, draft, schedule,
forward, accept, commit; they sum to the round), rounds that drafted vs not, drafted tokens
verified per request per round, and the whole run's tokens/s against plain. A scheduled round
that verifies (almost) nothing should cost what a plain round of the same batch costs; the
parts say which phase pays when it does not. Two more views: why the draft gate let each
full-batch round draft or not (a probe, a prediction, a measurement), and the whole run's
time and tokens by round class (full batch, with a prefill chunk, partial rows: the drain),
which places a whole-run loss that the full-batch rounds do not show.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specd.worker.bench.groups import Group
from specd.worker.bench.prompts import BenchPrompt
from specd.worker.bench.run_order import in_turn

PARTS = ("gate", "draft", "schedule", "forward", "accept", "commit")


@dataclass
class GroupRounds:
    name: str
    rounds: list[Any] = field(default_factory=list)  # RoundStats
    seconds: float = 0.0
    tokens: int = 0
    gate: list[str] = field(default_factory=list)  # per round: why the gate chose ("": not asked)


OPEN_GATE = "+open-gate"  # a scheduled group's twin whose every round drafts


def with_open_gate(groups: Sequence[Group]) -> list[Group]:
    """``groups`` and, after each scheduled one, its twin with the draft gate held open: every
    round drafts and the scheduler alone decides what is verified, as before the gate priced
    rounds with the measured step costs (issue 26), so the two show what the gate saves."""
    out: list[Group] = []
    for g in groups:
        out.append(g)
        if g.mode == "scheduled":
            out.append(dataclasses.replace(g, name=g.name + OPEN_GATE))
    return out


def open_gate(gate: Any) -> Any:
    """The engine's draft gate, made to draft in every round (still learning and recording)."""
    from specd.worker.engine.draft_gate import Choice, DraftGate

    class OpenGate(DraftGate):
        def choose(self, *args: Any, **kwargs: Any) -> Choice:
            return Choice(True, why="held open")

    return OpenGate(gate.costs, gate.outcomes)


class _GateLog:
    """Keeps why the engine's draft gate chose what it did in the round under way."""

    def __init__(self, core: Any) -> None:
        self.why = ""
        choose = core.gate.choose

        def logged(*args: Any, **kwargs: Any) -> Any:
            choice = choose(*args, **kwargs)
            self.why = choice.why
            return choice

        core.gate.choose = logged


def run(loaded: Any, groups: Sequence[Group], prompts: Sequence[BenchPrompt], concurrency: int,
        max_tokens: int, k: int, passes: int, engine_options: dict[str, Any] | None = None,
        lockstep: bool = False) -> dict[str, GroupRounds]:
    """Every group over ``prompts`` at ``concurrency``, ``passes`` times, on this thread (a
    group named ``...+open-gate``: its draft gate held open). A group's seconds are its
    rounds' (``step``) time. ``lockstep``: in each pass the groups' engines take one round
    each in turn (the order turning round by round) instead of a whole pass each, so
    the rounds compared ran a fraction of a second apart and a slow spell of the machine
    falls on every group alike."""
    from specd.worker.engine import Engine, EngineConfig, GenerationRequest, SamplingParams

    max_prompt = max(len(p.token_ids) for p in prompts)
    engines = {}
    for g in groups:
        config = EngineConfig(drafter=g.drafter, prompt_lookup=g.lookup, max_slots=concurrency,
                              max_context=max_prompt + max_tokens + 2 * g.draft_length(k) + 8,
                              **(engine_options or {}))
        engine = Engine(loaded, config, policy=g.policy(k))
        engine.prepare()  # its step-cost table, as a serving engine measures at start
        if g.name.endswith(OPEN_GATE):
            engine.core.gate = open_gate(engine.core.gate)
        engines[g.name] = engine
    out = {g.name: GroupRounds(g.name) for g in groups}
    logs = {name: _GateLog(engine.core) for name, engine in engines.items()}

    def step(name: str) -> bool:
        """One round of ``name``'s engine, kept with why its gate chose; False when idle."""
        core, rec, log = engines[name].core, out[name], logs[name]
        log.why = ""
        began = time.perf_counter()
        worked = core.step()
        rec.seconds += time.perf_counter() - began
        if worked:
            rec.rounds.append(core.last_round)
            rec.gate.append(log.why)
        return worked

    for turn in range(passes):
        order = [g.name for g in in_turn(groups, turn)]
        for name in order:
            core = engines[name].core
            for p in prompts:
                core.add(GenerationRequest(list(p.token_ids),
                                           SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                                           p.task_group), lambda _event: None)
            out[name].tokens += len(prompts) * max_tokens
        if lockstep:
            running, turns = order, 0
            while running:
                # a round of each, in the balanced order of the round's turn
                idle = [n for n in in_turn(running, turns) if not step(n)]
                running = [n for n in running if n not in idle]
                turns += 1
        else:
            for name in order:
                while step(name):
                    pass
    return out


def summarise(results: dict[str, GroupRounds], concurrency: int) -> dict[str, Any]:
    plain = results.get("plain")
    plain_rate = plain.tokens / plain.seconds if plain and plain.seconds else None
    doc: dict[str, Any] = {}
    for name, rec in results.items():
        def is_full(r: Any) -> bool:
            return round_shape(r, concurrency) == "full"

        full = [r for r in rec.rounds if is_full(r)]
        drafted = [r for r in full if r.kind == "speculative"]
        # why the gate let full-batch rounds draft or not (a probe, a prediction, a measurement)
        reasons = Counter((r.kind, why) for r, why in zip(rec.rounds, rec.gate, strict=False)
                          if why and is_full(r))
        rate = rec.tokens / rec.seconds if rec.seconds else 0.0

        def mean_ms(rounds: list[Any]) -> dict[str, float]:
            if not rounds:
                return {}
            parts = {p: 1e3 * statistics.mean(r.parts.get(p, 0.0) for r in rounds)
                     for p in PARTS}
            parts["round"] = 1e3 * statistics.mean(r.seconds for r in rounds)
            return {p: round(v, 3) for p, v in parts.items()}

        doc[name] = {
            "tokens_per_s": round(rate, 2),
            "vs_plain": round(rate / plain_rate, 3) if plain_rate else None,
            "rounds": len(rec.rounds),
            "full_batch_rounds": len(full),
            "drafted_share": round(len(drafted) / len(full), 4) if full else None,
            "verified_per_request": (round(sum(r.verified for r in full)
                                           / (len(full) * concurrency), 4) if full else None),
            "tokens_per_round": (round(sum(r.emitted for r in full) / len(full), 3)
                                 if full else None),
            "drafted_why": {why: n for (kind, why), n in reasons.most_common()
                            if kind == "speculative"},
            "not_drafted_why": {why: n for (kind, why), n in reasons.most_common()
                                if kind == "plain"},
            "ms_per_full_round": mean_ms(full),
            "ms_drafted": mean_ms(drafted),
            "ms_not_drafted": mean_ms([r for r in full if r.kind == "plain"]),
            "by_class": by_class(rec.rounds, concurrency),
        }
    return doc


def round_shape(r: Any, concurrency: int) -> str:
    """``full`` (every slot decoding, no prefill), ``prefill`` (a newcomer's chunk in the
    forward) or ``partial`` (fewer rows: the drain)."""
    return "prefill" if r.prefill_tokens else "full" if r.rows == concurrency else "partial"


def round_class(r: Any, concurrency: int) -> str:
    """``round_shape``, with ``/drafted`` when the drafter ran."""
    return round_shape(r, concurrency) + ("/drafted" if r.kind == "speculative" else "")


def by_class(rounds: Sequence[Any], concurrency: int) -> dict[str, dict[str, float]]:
    """The whole run's time split by ``round_class``: where a group's run loses or gains
    against plain's (the full-batch table above leaves the drain and the prefills out)."""
    out: dict[str, dict[str, float]] = {}
    for r in rounds:
        c = out.setdefault(round_class(r, concurrency),
                           {"rounds": 0, "seconds": 0.0, "tokens": 0, "rows": 0})
        c["rounds"] += 1
        c["seconds"] += r.seconds
        c["tokens"] += r.emitted
        c["rows"] += r.rows
    for c in out.values():
        c["ms_per_token"] = round(1e3 * c["seconds"] / c["tokens"], 3) if c["tokens"] else None
        c["seconds"] = round(c["seconds"], 3)
    return dict(sorted(out.items()))


def format_table(doc: dict[str, Any]) -> str:
    head = ["group", "tok/s", "vs plain", "drafted", "verified/req", "tok/round", "round ms",
            *PARTS]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for name, d in doc.items():
        for label, ms in (("", d["ms_per_full_round"]), (" (drafted)", d["ms_drafted"]),
                          (" (not drafted)", d["ms_not_drafted"])):
            if not ms or (label and d["drafted_share"] in (0.0, 1.0, None)):
                continue
            first = not label
            lines.append(" | ".join([
                name + label,
                f"{d['tokens_per_s']:.1f}" if first else "",
                f"{d['vs_plain']:.3f}" if first and d["vs_plain"] is not None else "",
                f"{d['drafted_share']:.3f}" if first else "",
                f"{d['verified_per_request']:.3f}" if first else "",
                f"{d['tokens_per_round']:.2f}" if first else "",
                f"{ms['round']:.2f}", *(f"{ms[p]:.2f}" for p in PARTS)]))
    return "\n".join(lines)
