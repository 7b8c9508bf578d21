"""What a plain task group pays for living on a speculative worker: the same requests on
two engines in one process, one with a drafter whose policy sends the group plain (as the
tuner does) and one without a drafter (a plain-only worker), taken in turns request by
request so a busy machine slows both alike.

    python -m specd.worker.bench.plain_group_cost --drafter draft-model --k 12 \\
        --prompt "Write a story about a dragon." --temperature 2.0 --pairs 30

Each request is seeded (the coupled rule), so both engines emit the same tokens and each pair
compares the same work. Per request, TPOT as the workers' histograms define it (end minus
first token, over tokens after the first); the report is the ratio of the plain-only engine's
mean TPOT to the drafter engine's (>= 1: the plain group is as fast as true plain), with its
pair-by-pair spread. ``--speculative-prompt`` interleaves a request of another group that does
speculate on the drafter engine (as mixed traffic does), not timed.
"""

from __future__ import annotations

import argparse
import statistics


def tpot(engine: object, ids: list[int], params: object, group: str) -> tuple[float, int]:
    """One request alone on ``engine``: (seconds from first to last token, tokens after the
    first), from ``Engine.generate``'s own timings."""
    from specd.worker.engine import GenerationRequest

    (out,) = engine.generate([GenerationRequest(list(ids), params, group)])  # type: ignore[attr-defined]
    return out.latency_s - out.first_token_s, len(out.token_ids) - 1


def main(argv: list[str] | None = None) -> None:
    import torch

    from specd.api.policy import GroupPolicy, Policy
    from specd.worker.engine import Engine, EngineConfig, SamplingParams
    from specd.worker.model import load_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafter", default="draft-model")
    ap.add_argument("--k", type=int, default=12)
    ap.add_argument("--prompt", default="Write a story about a dragon.")
    ap.add_argument("--temperature", type=float, default=2.0)
    ap.add_argument("--speculative-prompt", default="Count from 1 to 30, separated by commas.")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    loaded = load_model("smollm2-135m", "cpu", "float32")

    def template(text: str) -> list[int]:
        ids = loaded.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                   add_generation_prompt=True)
        return list(ids if isinstance(ids, list) else ids["input_ids"])

    tuned_policy = Policy(mode="fixed", k_max=args.k, fixed_length=args.k, max_verify=args.k,
                          groups={"code": GroupPolicy(mode="plain"),
                                  "chat": GroupPolicy(k_max=2, fixed_length=2)})
    tuned = Engine(loaded, EngineConfig(drafter=args.drafter, max_slots=4, max_context=512,
                                        cost_profile="none"), tuned_policy)
    plain = Engine(loaded, EngineConfig(drafter="none", max_slots=4, max_context=512,
                                        cost_profile="none"), Policy(mode="plain"))
    tuned.prepare()
    plain.prepare()
    ids, chat = template(args.prompt), template(args.speculative_prompt)
    chat_params = SamplingParams(max_tokens=args.max_tokens)
    ratios, sums = [], {"tuned": [0.0, 0], "plain": [0.0, 0]}
    for i in range(args.pairs + 1):  # the first pair warms both up, not counted
        params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature,
                                seed=1000 + i)
        if args.speculative_prompt:
            tpot(tuned, chat, chat_params, "chat")
        order = [("tuned", tuned), ("plain", plain)]
        if i % 2:
            order.reverse()  # neither engine always runs second
        got = {name: tpot(engine, ids, params, "code") for name, engine in order}
        if i == 0 or min(n for _, n in got.values()) <= 0:
            continue
        for name, (s, n) in got.items():
            sums[name][0] += s
            sums[name][1] += n
        ratios.append((got["plain"][0] / got["plain"][1]) / (got["tuned"][0] / got["tuned"][1]))
    mean = {name: s / n for name, (s, n) in sums.items()}
    q = statistics.quantiles(ratios, n=4)
    print(f"{args.drafter} K={args.k}, group plain, {args.pairs} pairs of {args.max_tokens} "
          f"tokens at temperature {args.temperature}, {args.threads} thread(s)")
    print(f"mean TPOT: drafter engine (group plain) {1000 * mean['tuned']:.2f} ms, plain-only "
          f"engine {1000 * mean['plain']:.2f} ms; plain-only / drafter engine = "
          f"{mean['plain'] / mean['tuned']:.3f} (pairs: median {statistics.median(ratios):.3f}, "
          f"quartiles {q[0]:.3f}-{q[2]:.3f})")


if __name__ == "__main__":
    main()
