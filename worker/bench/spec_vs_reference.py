"""Per task group, speculative goodput against the engine's own plain reference rounds: the
comparison the tuner makes, measured in-process, for choosing end-to-end test scenarios
whose contrast is far outside the tuner's margin before a cluster test is built on them.

    python -m specd.worker.bench.spec_vs_reference --drafter semi-ar --k 4 \\
        --concurrency 1,16 --group "chat=Count from 1 to 30, separated by commas." \\
        --group "code=Write a story about a dragon.@1.5"

One engine per concurrency, a closed loop of ``--requests`` chat-templated requests (the
groups in turn, ``TEXT@TEMPERATURE``), fixed verification at K (or ``--mode scheduled``,
which measures its step costs first) with ``--share`` of the decode rounds plain for
everyone. From the engine's counters, per group: tokens per request-second of speculative
rounds (goodput), of plain rounds (the reference), and their ratio, from the same counters
(``specd_decode_tokens`` / ``specd_decode_seconds`` by round kind) the workers export and the
tuner reads. The two kinds of round interleave in one run, so a busy machine slows both
alike.
"""

from __future__ import annotations

import argparse

from specd.api import metrics as m


def rates_by_group(registry: object) -> dict[tuple[str, str], tuple[float, float]]:
    """(group, round kind) -> (tokens, request-seconds) over decode rounds."""
    out: dict[tuple[str, str], list[float]] = {}
    for family in registry.collect():  # type: ignore[attr-defined]
        if family.name not in (m.DECODE_TOKENS, m.DECODE_SECONDS):
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            key = (sample.labels[m.LABEL_TASK_GROUP], sample.labels[m.LABEL_ROUND_KIND])
            pair = out.setdefault(key, [0.0, 0.0])
            pair[0 if family.name == m.DECODE_TOKENS else 1] += sample.value
    return {k: (t, s) for k, (t, s) in out.items()}


def positions(registry: object) -> dict[str, list[tuple[float, float, float]]]:
    """group -> per draft position 1, 2, ...: (conditional acceptance where reached, times
    reached, mean predicted confidence where reached), as the tuner reads them."""
    names = {m.ACCEPTED_PER_POSITION: 0, m.REACHED_PER_POSITION: 1, m.PREDICTED_PER_POSITION: 2}
    counts: dict[tuple[str, int], list[float]] = {}
    for family in registry.collect():  # type: ignore[attr-defined]
        if family.name not in names:
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            key = (sample.labels[m.LABEL_TASK_GROUP], int(sample.labels[m.LABEL_POSITION]))
            counts.setdefault(key, [0.0, 0.0, 0.0])[names[family.name]] += sample.value
    out: dict[str, list[tuple[float, float, float]]] = {}
    for (group, _), (accepted, reached, predicted) in sorted(counts.items()):
        out.setdefault(group, []).append(
            (accepted / reached, reached, predicted / reached) if reached
            else (float("nan"), 0.0, float("nan")))
    return out


def parse_group(text: str) -> tuple[str, str, float]:
    """``name=prompt`` or ``name=prompt@temperature``."""
    name, _, rest = text.partition("=")
    if not name or not rest:
        raise argparse.ArgumentTypeError(f"--group wants NAME=TEXT[@TEMPERATURE], not {text!r}")
    prompt, at, temp = rest.rpartition("@")
    if not at:
        return name, rest, 0.0
    try:
        return name, prompt, float(temp)
    except ValueError:
        return name, rest, 0.0  # an '@' inside the prompt


def main(argv: list[str] | None = None) -> None:
    from prometheus_client import CollectorRegistry

    from specd.api.policy import Calibration, Policy
    from specd.worker.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
    from specd.worker.model import load_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafter", default="semi-ar")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--mode", choices=("fixed", "scheduled"), default="fixed")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--requests", type=int, default=32, help="requests per concurrency")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--share", type=float, default=0.3, help="plain_rounds (the reference)")
    ap.add_argument("--group", action="append", type=parse_group, required=True)
    ap.add_argument("--bias", type=float, default=0.0,
                    help="calibration bias on every position (logit units; scheduled mode)")
    ap.add_argument("--survival-floor", type=float,
                    default=Policy.model_fields["survival_floor"].default)
    args = ap.parse_args(argv)
    loaded = load_model("smollm2-135m", "cpu", "float32")
    groups = []
    for name, text, temp in args.group:
        ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                   add_generation_prompt=True)
        groups.append((name, list(ids if isinstance(ids, list) else ids["input_ids"]), temp))
    policy = Policy(mode=args.mode, k_max=args.k, fixed_length=args.k, max_verify=args.k,
                    plain_rounds=args.share, survival_floor=args.survival_floor,
                    calibration=Calibration(bias=[args.bias] if args.bias else []))
    print(f"{args.drafter} {args.mode} K={args.k}, {args.max_tokens} tokens, "
          f"{args.share:.0%} reference rounds")
    print(f"{'c':>3} {'group':>8} {'spec tok/s':>11} {'plain tok/s':>12} {'ratio':>6} "
          f"{'plain tokens':>13}  per position: acceptance/predicted (reached)")
    for c in [int(x) for x in args.concurrency.split(",")]:
        registry = CollectorRegistry()
        engine = Engine(loaded, EngineConfig(drafter=args.drafter, max_slots=c,
                                             max_context=512,
                                             cost_profile="measure" if args.mode == "scheduled"
                                             else "none"),
                        policy, registry=registry)
        engine.prepare()
        core, done = engine.core, []
        sent = 0
        while True:  # a closed loop: c requests in flight until --requests were sent
            while sent < args.requests and sent - len(done) < c:
                name, ids, temp = groups[sent % len(groups)]
                core.add(GenerationRequest(list(ids), SamplingParams(
                    max_tokens=args.max_tokens, temperature=temp), name),
                    lambda event, done=done: done.append(event) if event.finished else None)
                sent += 1
            if not core.step():
                break
        rates, by_position = rates_by_group(registry), positions(registry)
        for name, _, _ in groups:
            spec_t, spec_s = rates.get((name, "speculative"), (0.0, 0.0))
            plain_t, plain_s = rates.get((name, "plain"), (0.0, 0.0))
            spec_r = spec_t / spec_s if spec_s else float("nan")
            plain_r = plain_t / plain_s if plain_s else float("nan")
            print(f"{c:>3} {name:>8} {spec_r:>11.1f} {plain_r:>12.1f} "
                  f"{spec_r / plain_r if plain_s and spec_s else float('nan'):>6.2f} "
                  f"{plain_t:>13.0f}  "
                  + " ".join(f"{a:.2f}/{p:.2f}({n:.0f})"
                             for a, n, p in by_position.get(name, [])))


if __name__ == "__main__":
    main()
