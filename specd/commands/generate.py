"""``specd generate``: a short greedy generation with the target model (a smoke test)."""

from __future__ import annotations

import argparse

HELP = "generate a completion with the target model (plain greedy decoding)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m",
                        help="model reference: embedded alias, local dir, .gguf path or hub id")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    parser.add_argument("--prompt", default="What is speculative decoding?",
                        help="user message (the chat template is applied)")
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens to generate")


def run(args: argparse.Namespace) -> int:
    import time

    import torch

    from specd.worker.model import load_model

    loaded = load_model(args.model, args.device, args.dtype)
    tok = loaded.tokenizer
    ids = tok.apply_chat_template([{"role": "user", "content": args.prompt}],
                                  add_generation_prompt=True, return_tensors="pt")
    if not isinstance(ids, torch.Tensor):  # newer transformers return a BatchEncoding
        ids = ids["input_ids"]
    ids = ids.to(loaded.device)
    start = time.perf_counter()
    with torch.inference_mode():
        out = loaded.model.generate(ids, attention_mask=torch.ones_like(ids),
                                    max_new_tokens=args.max_tokens, do_sample=False)
    elapsed = time.perf_counter() - start
    new = out[0, ids.shape[1]:]
    print(tok.decode(new, skip_special_tokens=True))
    print(f"[{len(new)} tokens in {elapsed:.2f}s on {loaded.device}, "
          f"{len(new) / elapsed:.1f} tok/s]")
    return 0
