"""Peer baselines run by the benchmark: transformers' own decoding loops, batch 1.

``hf-generate`` is plain greedy ``generate()``; ``hf-assisted`` is transformers' assisted
generation, with the project's draft model as the assistant when one is given, else prompt
lookup. They share the benchmark's prompts and token budget, so their tokens/s sit beside
the engine's groups in one table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from specd.worker.bench.prompts import BenchPrompt


@dataclass
class PeerResult:
    outputs: list[list[int]] = field(default_factory=list)
    seconds: float = 0.0
    per_request_tokens_per_s: list[float] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(len(o) for o in self.outputs)


@torch.inference_mode()
def run_hf_peer(model: Any, prompts: Sequence[BenchPrompt], max_tokens: int,
                assistant: Any | None = None, prompt_lookup: int = 0,
                on_done: Callable[[], None] | None = None) -> PeerResult:
    """Greedy-generate each prompt one at a time with ``model.generate``."""
    device = next(model.parameters()).device
    result = PeerResult()
    extra: dict[str, Any] = {}
    if assistant is not None:
        extra["assistant_model"] = assistant
    elif prompt_lookup:
        extra["prompt_lookup_num_tokens"] = prompt_lookup
    start = time.perf_counter()
    for prompt in prompts:
        ids = torch.tensor([prompt.token_ids], device=device)
        began = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                             pad_token_id=0, **extra)
        new = out[0, ids.shape[1]:].tolist()
        result.outputs.append(new)
        result.per_request_tokens_per_s.append(len(new) / (time.perf_counter() - began))
        if on_done:
            on_done()
    result.seconds = time.perf_counter() - start
    return result


def draft_lm_as_hf_assistant(draft_lm: Any, target: Any) -> Any:
    """Wrap the project's DraftLM as a transformers LlamaForCausalLM for assisted generation.

    The draft model's layers are its own; its embeddings and LM head are the target's (the
    DraftLM shares them rather than storing copies), so the assistant reuses those tensors.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**draft_lm.llama.config.to_dict(),
                            "vocab_size": target.config.vocab_size,
                            "tie_word_embeddings": False})
    assistant = LlamaForCausalLM(config)
    missing, unexpected = assistant.model.load_state_dict(draft_lm.llama.state_dict(),
                                                          strict=False)
    if unexpected or [m for m in missing if not m.startswith("embed_tokens")]:
        raise RuntimeError(f"draft model layout mismatch: missing={missing} unexpected={unexpected}")
    assistant.model.embed_tokens.weight = target.get_input_embeddings().weight
    assistant.lm_head.weight = target.get_output_embeddings().weight
    assistant.generation_config.pad_token_id = 0
    return assistant.to(next(target.parameters()).device).eval()
