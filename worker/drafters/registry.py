"""Build the runtime drafter named in the engine config."""

from __future__ import annotations

from typing import Any

import torch

from specd.worker.drafters.base import Drafter

UNTRAINED = "untrained"  # drafter_path value: randomly initialised nets (tests, smoke runs)


def untrained_net(method: str, target_model: Any, num_positions: int = 8, seed: int = 0,
                  context: bool = False, feature_layers: list[int] | None = None) -> Any:
    """A freshly initialised net of ``method`` bound to the target (no artifact needed);
    ``context``: semi-ar with a context layer, ``feature_layers``: semi-ar reading those
    target layers too (their zero-initialised projections randomised, so the extra inputs
    are exercised rather than starting as no-ops)."""
    from specd.worker.drafters.nets import DraftLM, ParallelHeads, SemiARDrafter, context_config

    cfg = target_model.config
    vocab = cfg.vocab_size
    hidden = cfg.hidden_size
    vocab_ids = torch.arange(vocab)
    torch.manual_seed(seed)
    if method == "parallel":
        net = ParallelHeads(hidden, num_positions, vocab_ids, vocab)
    elif method == "semi-ar":
        net = SemiARDrafter(hidden, num_positions, vocab_ids, vocab,
                            context=context_config(cfg) if context else None,
                            feature_layers=feature_layers)
        if context:
            torch.nn.init.normal_(net.context.proj.weight, std=0.02)
        if feature_layers:
            torch.nn.init.normal_(net.layer_proj.weight, std=0.02)
    elif method == "draft-model":
        rope = getattr(cfg, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
        net = DraftLM(hidden, num_positions, vocab_ids, vocab, num_layers=2,
                      num_heads=cfg.num_attention_heads, num_kv_heads=cfg.num_key_value_heads,
                      intermediate_size=cfg.intermediate_size, rope_theta=theta,
                      rms_norm_eps=cfg.rms_norm_eps)
    else:
        raise ValueError(f"no net for drafter {method!r}")
    net.bind(target_model)
    net.eval()
    net.requires_grad_(False)
    return net


def build_drafter(name: str, target: Any, path: str | None = None, slots: int = 32,
                  max_context: int = 2048, net: Any = None, lookup: bool = False) -> Drafter:
    """``target``: a LoadedModel. ``path``: an artifact folder, ``untrained``, or None for the
    committed artifact of that name. ``net``: an already bound net (overrides ``path``).
    ``lookup``: prompt lookup beside the trained drafter (``LookupHybridDrafter``)."""
    drafter = _build(name, target, path, slots, max_context, net)
    if lookup:
        from specd.worker.drafters.lookup_hybrid import LookupHybridDrafter

        return LookupHybridDrafter(drafter)
    return drafter


def _build(name: str, target: Any, path: str | None, slots: int, max_context: int,
           net: Any) -> Drafter:
    from specd.worker.drafters.draft_model import DraftModelDrafter
    from specd.worker.drafters.heads import ContextHeadDrafter, HeadDrafter
    from specd.worker.drafters.ngram import NgramDrafter

    if name == "none":
        return Drafter()
    if name == "ngram":
        return NgramDrafter()
    if net is None:
        if path == UNTRAINED:
            net = untrained_net(name, target.model)
        else:
            from specd.worker.drafters.artifacts import load_drafter

            net = load_drafter(path or name, target)
            if getattr(net, "method", name) != name:
                from specd import SpecdError

                raise SpecdError(f"artifact {path} holds a {net.method!r} drafter, not {name!r}")
    if name in ("parallel", "semi-ar"):
        if getattr(net, "context", None) is not None:
            return ContextHeadDrafter(name, net, slots, max_context)
        return HeadDrafter(name, net)
    if name == "draft-model":
        return DraftModelDrafter(net, slots, max_context)
    raise ValueError(f"unknown drafter {name!r}")
