"""Reference decoding: one target forward per token, no speculation.

This is the oracle the engine's losslessness tests compare against, and the path
``specd generate`` can use to show the embedded model works.
"""

from __future__ import annotations

from typing import Any

import torch


@torch.inference_mode()
def greedy_decode(model: Any, input_ids: list[int], max_new_tokens: int,
                  eos_token_id: int | None = None) -> list[int]:
    """Greedy-decode ``max_new_tokens`` tokens (stopping at EOS) with the model's KV cache."""
    device = next(model.parameters()).device
    ids = torch.tensor([input_ids], device=device)
    out = model(input_ids=ids, use_cache=True)
    past = out.past_key_values
    generated: list[int] = []
    for _ in range(max_new_tokens):
        token = int(out.logits[0, -1].argmax())
        generated.append(token)
        if eos_token_id is not None and token == eos_token_id:
            break
        out = model(input_ids=torch.tensor([[token]], device=device),
                    past_key_values=past, use_cache=True)
        past = out.past_key_values
    return generated
