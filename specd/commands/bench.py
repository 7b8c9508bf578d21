"""``specd bench engine``: compare drafting groups side by side in one run."""

from __future__ import annotations

import argparse

HELP = "benchmarks that compare groups side by side in one run (specd bench engine ...)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    engine = sub.add_parser(
        "engine", help="every group over the same prompts at each concurrency",
        description="Run named groups (drafter + verification policy, or transformers' own "
                    "loops) over a prompt file at a list of concurrencies; print a table and "
                    "write JSON. Greedy, EOS ignored so every request emits --max-tokens "
                    "(or its share of it, with --length-spread).")
    from specd.worker.bench.groups import DEFAULT_GROUPS  # light: no torch

    engine.add_argument("--model", default="smollm2-135m", help="target model reference")
    engine.add_argument("--groups", default=",".join(DEFAULT_GROUPS),
                        help="comma-separated groups (plain is always added as the reference)")
    engine.add_argument("--concurrency", default="1,4,16,32",
                        help="comma-separated concurrent request counts")
    engine.add_argument("--prompts", default=None,
                        help="JSONL prompt file (default: the packaged 48-prompt set)")
    _add_prompt_choice(engine)
    engine.add_argument("--max-tokens", type=int, default=128, help="output tokens per request")
    engine.add_argument("--k", type=int, default=3, help="draft length K (fixed verifies K)")
    engine.add_argument("--length-spread", type=float, default=0.0,
                        help="spread the requests' output lengths evenly over "
                             "[(1 - S) x --max-tokens, --max-tokens], the same in every group "
                             "(0: all equal; engine groups only)")
    engine.add_argument("--min-seconds", type=float, default=0.0,
                        help="repeat the engine groups at each concurrency in passes until "
                             "each has run this long there (median pass reported; at most "
                             "5 passes)")
    engine.add_argument("--passes", type=int, default=1,
                        help="run every cell in at least this many passes (with "
                             "--min-seconds, whichever asks for more; median reported); the "
                             "groups' order is balanced over whole cycles of slices")
    engine.add_argument("--sampling", default="greedy",
                        help="comma-separated sampling variants, each engine group runs once "
                             "per variant as <group>@<variant>: greedy, tT (unseeded, the "
                             "standard rule), tT-seeded (seed per prompt, the coupled rule); "
                             "e.g. t0.7,t0.7-seeded,t1.0,t1.0-seeded")
    engine.add_argument("--cost-profile", choices=("measure", "none"), default="measure",
                        help="none: skip the engines' start-up step-cost measurement (cost = "
                             "token count; fine for fixed-length groups, which never read it)")
    engine.add_argument("--device", default="auto")
    engine.add_argument("--dtype", default="auto")
    engine.add_argument("--json", dest="json_out", default=None, help="write results here")

    rounds = sub.add_parser(
        "rounds", help="where a round's time goes (gate, draft, schedule, forward, accept, "
                       "commit), per group, at one concurrency",
        description="Run groups over a prompt file at one concurrency in passes, the "
                    "groups' order turning in a balanced design; compare full-batch decode "
                    "rounds part by part. Greedy, EOS ignored.")
    rounds.add_argument("--model", default="smollm2-135m", help="target model reference")
    rounds.add_argument("--groups", default="plain,semi-ar-fixed,semi-ar-scheduled",
                        help="comma-separated engine groups (plain is always added)")
    rounds.add_argument("--concurrency", type=int, default=16)
    rounds.add_argument("--prompts", default=None,
                        help="JSONL prompt file (default: the packaged held-out set)")
    _add_prompt_choice(rounds)
    rounds.add_argument("--max-tokens", type=int, default=64)
    rounds.add_argument("--k", type=int, default=3, help="draft length K")
    rounds.add_argument("--passes", type=int, default=None,
                        help="passes over the prompts (default: one cycle of the groups' "
                             "balanced order: as many as groups, twice that for an odd count)")
    rounds.add_argument("--open-gate", action="store_true",
                        help="also run each scheduled group with its draft gate held open "
                             "(every round drafts: the engine before issue 26's fix)")
    rounds.add_argument("--lockstep", action="store_true",
                        help="in each pass the groups take one round each in turn instead of a "
                             "whole pass each: the rounds compared run a fraction of a second "
                             "apart (a noisy machine's slow spells fall on every group alike)")
    rounds.add_argument("--device", default="auto")
    rounds.add_argument("--dtype", default="auto")
    rounds.add_argument("--json", dest="json_out", default=None, help="write results here")


def _add_prompt_choice(parser: argparse.ArgumentParser) -> None:
    """--limit / --sample, read by ``prompts.select_rows``."""
    parser.add_argument("--limit", type=int, default=0, help="use only the first N prompts")
    parser.add_argument("--sample", type=int, default=0,
                        help="use N prompts spread over the file's task groups and languages "
                             "in proportion (instead of --limit)")


def run(args: argparse.Namespace) -> int:
    if args.bench == "rounds":
        return run_rounds(args)
    import time

    import torch

    from specd import SpecdError
    from specd.worker.bench import engine_bench as bench
    from specd.worker.bench.groups import parse_concurrency, parse_groups, with_sampling
    from specd.worker.bench.prompts import (
        DEFAULT_PROMPTS,
        encode_prompts,
        read_prompt_file,
        select_rows,
    )
    from specd.worker.engine.threads import run_on_compute_thread, serial_main_thread
    from specd.worker.model import load_model

    groups = with_sampling(parse_groups(args.groups),
                           [v.strip() for v in args.sampling.split(",") if v.strip()])
    concurrencies = parse_concurrency(args.concurrency)
    if min(args.max_tokens, args.k, args.passes) < 1:
        raise SpecdError("--max-tokens, --k and --passes must be >= 1")
    if not 0.0 <= args.length_spread < 1.0:
        raise SpecdError(f"--length-spread must be in [0, 1), got {args.length_spread}")
    if args.length_spread and any(g.peer for g in groups):
        raise SpecdError("--length-spread runs engine groups only (transformers' loops "
                         "emit --max-tokens each)")
    prompt_file = args.prompts or DEFAULT_PROMPTS
    rows, chosen = select_rows(read_prompt_file(prompt_file), args.limit, args.sample)
    engine_count = sum(1 for g in groups if not g.peer)
    if engine_count:
        _warn_uneven_order(engine_count, {c: len(bench.slices(len(rows), c)) * args.passes
                                          for c in concurrencies})
    torch.manual_seed(0)
    # tensor work runs on one live thread at a time: the engines' round threads and a
    # short-lived thread for transformers' loops, never the main thread (see engine.threads)
    threads = serial_main_thread()
    loaded = load_model(args.model, args.device, args.dtype)
    prompts = encode_prompts(rows, loaded.tokenizer)
    draft_assistant = None
    if any(g.peer == "assisted-draft" for g in groups):
        from specd.worker.bench.peers import draft_lm_as_hf_assistant
        from specd.worker.drafters.artifacts import load_drafter

        draft_lm = load_drafter("draft-model", loaded)
        draft_assistant = draft_lm_as_hf_assistant(draft_lm, loaded.model)

    results: dict[str, dict[int, bench.Cell]] = {}
    started = time.perf_counter()

    def progress(name: str, concurrency: int) -> None:
        print(f"[{time.perf_counter() - started:6.0f}s] {name} c={concurrency} ...", flush=True)

    for group in (g for g in groups if g.peer):  # transformers' loops: batch 1 only
        progress(group.name, 1)
        results[group.name] = run_on_compute_thread(
            bench.run_peer_group, loaded, group, prompts, args.max_tokens, draft_assistant,
            threads=threads)
    engine_groups = [g for g in groups if not g.peer]
    if engine_groups:
        print(f"[{time.perf_counter() - started:6.0f}s] starting "
              f"{len({g.base for g in engine_groups})} engines "
              "(the first measures the step-cost table all use)", flush=True)
        results |= bench.run_engine_groups(loaded, engine_groups, prompts, concurrencies,
                                           args.max_tokens, args.k, on_cell=progress,
                                           engine_options={"threads": threads,
                                                           "cost_profile": args.cost_profile},
                                           min_seconds=args.min_seconds,
                                           passes=args.passes,
                                           length_spread=args.length_spread)
    results = {g.name: results[g.name] for g in groups}  # the order the groups were named in
    eos = loaded.tokenizer.eos_token_id
    # outputs that differ from plain's: the target's top-2 gap where they first do (on the
    # compute thread: the main thread stays serial)
    run_on_compute_thread(bench.mark_matches, results, eos_ids=[eos] if eos is not None else [],
                          until_eos=[g.name for g in groups if g.peer],
                          top2_gap=bench.target_top2_gap(loaded.model, prompts), threads=threads)
    doc = bench.report(args.model, results, {
        "prompts": len(prompts), "prompt_file": str(prompt_file), "prompts_chosen": chosen,
        "max_tokens": args.max_tokens, "k": args.k,
        "concurrency": concurrencies, "device": loaded.device, "dtype": str(loaded.dtype),
        "threads": threads, "min_seconds": args.min_seconds, "passes": args.passes,
        "length_spread": args.length_spread,
        "sampling": args.sampling,
        "cost_profile": args.cost_profile,
        "slice_prompts": bench.SLICE_PROMPTS,
        # runs before 2026-12-07 alternated ABCD/DCBA (run_order's docstring says why not)
        "slice_order": "balanced"})
    print(bench.format_table(doc))
    bench.write_json(doc, args.json_out)
    return 0


def run_rounds(args: argparse.Namespace) -> int:
    import json

    import torch

    from specd import SpecdError
    from specd.worker.bench import round_breakdown
    from specd.worker.bench.groups import parse_groups
    from specd.worker.bench.prompts import (
        HELDOUT_PROMPTS,
        encode_prompts,
        read_prompt_file,
        select_rows,
    )
    from specd.worker.bench.run_order import group_orders
    from specd.worker.model import load_model

    groups = parse_groups(args.groups)
    if any(g.peer for g in groups):
        raise SpecdError("specd bench rounds runs engine groups only")
    if args.open_gate:
        groups = round_breakdown.with_open_gate(groups)
    if args.passes is None:
        args.passes = len(group_orders(len(groups)))
    if min(args.concurrency, args.max_tokens, args.k, args.passes) < 1:
        raise SpecdError("--concurrency, --max-tokens, --k and --passes must be >= 1")
    if not args.lockstep:  # in lockstep the order turns round by round, balanced in a pass
        _warn_uneven_order(len(groups), {args.concurrency: args.passes})
    prompt_file = args.prompts or HELDOUT_PROMPTS
    rows, chosen = select_rows(read_prompt_file(prompt_file), args.limit, args.sample)
    torch.manual_seed(0)
    loaded = load_model(args.model, args.device, args.dtype)
    prompts = encode_prompts(rows, loaded.tokenizer)
    results = round_breakdown.run(loaded, groups, prompts, args.concurrency, args.max_tokens,
                                  args.k, args.passes, lockstep=args.lockstep)
    doc = round_breakdown.summarise(results, args.concurrency)
    print(round_breakdown.format_table(doc))
    for name, d in doc.items():
        print(f"{name}: " + ", ".join(
            f"{cls} {c['rounds']} rounds {c['seconds']:.1f} s {c['tokens']} tok"
            + (f" ({c['ms_per_token']:.2f} ms/tok)" if c["ms_per_token"] else "")
            for cls, c in d["by_class"].items()))
        for key, what in (("drafted_why", "drafted"), ("not_drafted_why", "not drafted")):
            if d[key]:
                print(f"{name}: full-batch rounds {what} because "
                      + ", ".join(f"{why}: {n}" for why, n in d[key].items()))
    if args.json_out:
        meta = {"concurrency": args.concurrency, "max_tokens": args.max_tokens, "k": args.k,
                "passes": args.passes,
                "slice_order": "lockstep" if args.lockstep else "balanced",
                "open_gate": args.open_gate, "lockstep": args.lockstep,
                "prompts": len(prompts),
                "prompt_file": str(prompt_file), "prompts_chosen": chosen,
                "dtype": str(loaded.dtype), "device": str(loaded.device)}
        with open(args.json_out, "w") as f:
            json.dump({"meta": meta, "groups": doc}, f, indent=1)
    return 0


def _warn_uneven_order(groups: int, slices_at: dict[int, int]) -> None:
    """Say where a cell's slices are not whole cycles of the groups' balanced order: there
    the groups did not take each place equally often, and a place can move a ratio."""
    import sys

    from specd.worker.bench.run_order import group_orders

    cycle = len(group_orders(groups))
    for concurrency, count in slices_at.items():
        if count % cycle:
            print(f"note: at c={concurrency} the {count} slices are not whole cycles of the "
                  f"{groups} groups' order ({cycle} slices a cycle): their places stay "
                  "uneven (choose --passes to make them whole)", file=sys.stderr, flush=True)
