"""How close the tuner's true-plain reference is to real plain decoding, measured side by side.

    python -m specd.worker.bench.reference_error --concurrency 1,2,4 --repeats 3

A speculative engine (semi-ar, fixed K) with ``plain_rounds`` runs a share of its decode
rounds plain for every request; from its own counters the tuner reads the plain rate per
request at each batch-size bucket (tokens / request-seconds of plain rounds). A plain-only
engine (no drafter) over the same prompts gives the real thing. The two alternate
``--repeats`` times at each concurrency (this machine is shared: interleaving cancels slow
drifts) and the median ratio reference / real is printed per bucket.
"""

from __future__ import annotations

import argparse
import statistics

from specd.api import metrics as m


def plain_rates(registry: object) -> dict[str, tuple[float, float]]:
    """batch bucket -> (tokens, request-seconds) over plain rounds (every group)."""
    out: dict[str, list[float]] = {}
    for family in registry.collect():  # type: ignore[attr-defined]
        if family.name not in (m.DECODE_TOKENS, m.DECODE_SECONDS):
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total") or sample.labels.get(
                    m.LABEL_ROUND_KIND) != "plain":
                continue
            pair = out.setdefault(sample.labels[m.LABEL_BATCH], [0.0, 0.0])
            pair[0 if family.name == m.DECODE_TOKENS else 1] += sample.value
    return {b: (t, s) for b, (t, s) in out.items()}


def main(argv: list[str] | None = None) -> None:
    from prometheus_client import CollectorRegistry

    from specd.api.policy import Policy
    from specd.worker.bench.prompts import DEFAULT_PROMPTS, encode_prompts, read_prompt_file
    from specd.worker.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
    from specd.worker.engine.llama import LlamaRunner
    from specd.worker.model import load_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit", type=int, default=8, help="prompts per run")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--share", type=float, default=0.2, help="plain_rounds of the speculative engine")
    ap.add_argument("--drafter-path", default=None, help="'untrained' to skip artifacts")
    args = ap.parse_args(argv)
    loaded = load_model("smollm2-135m", "cpu", "auto")
    runner = LlamaRunner(loaded.model)
    prompts = encode_prompts(read_prompt_file(DEFAULT_PROMPTS)[:args.limit], loaded.tokenizer)
    params = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True)
    print(f"{'c':>3} {'bucket':>6} {'reference tok/s':>16} {'real plain tok/s':>17} "
          f"{'ratio':>6}   (per request, plain rounds; median of {args.repeats})")
    for c in [int(x) for x in args.concurrency.split(",")]:
        ratios: dict[str, list[tuple[float, float, float]]] = {}
        for _ in range(args.repeats):
            rates = {}
            for name, drafter, policy in (
                    ("reference", "semi-ar", Policy(mode="fixed", k_max=4, fixed_length=4,
                                                    plain_rounds=args.share)),
                    ("real", "none", Policy(mode="plain"))):
                registry = CollectorRegistry()
                engine = Engine(loaded, EngineConfig(drafter=drafter,
                                                     drafter_path=args.drafter_path,
                                                     max_slots=c, max_context=1024,
                                                     cost_profile="none"),
                                policy, registry=registry, runner=runner)
                for i in range(0, len(prompts), c):
                    engine.generate([GenerationRequest(p.token_ids, params)
                                     for p in prompts[i:i + c]])
                rates[name] = {b: t / s for b, (t, s) in plain_rates(registry).items() if s}
            for bucket, ref in rates["reference"].items():
                real = rates["real"].get(bucket)
                if real:
                    ratios.setdefault(bucket, []).append((ref, real, ref / real))
        for bucket, values in sorted(ratios.items(), key=lambda kv: int(kv[0])):
            ref = statistics.median(v[0] for v in values)
            real = statistics.median(v[1] for v in values)
            ratio = statistics.median(v[2] for v in values)
            print(f"{c:>3} {bucket:>6} {ref:>16.1f} {real:>17.1f} {ratio:>6.3f}")


if __name__ == "__main__":
    main()
