"""Drafter networks for the embedded target (SmolLM2-135M-Instruct and any Llama-like model).

How the engine calls each net
=============================

Positions. After a verify pass the engine knows, for each request, the target's final hidden
state ``hidden`` at the last verified position p (the output of the target's final RMSNorm,
i.e. the row that feeds ``lm_head``; ``target.model.model(...).last_hidden_state[:, p]``),
and the token committed from it, ``last_token`` = x[p+1] (the bonus / correction token, not
yet run through the target). A drafter proposes x[p+2], ..., x[p+1+k]. The next verify pass
feeds ``[last_token, d_1, ..., d_k]`` to the target, exactly as in Medusa / EAGLE engines.

Binding. Drafters reuse the target's frozen token embedding and LM head and never store them:
``load_drafter(name, target)`` (``specd.worker.drafters.artifacts``) returns a net already
bound (``net.bind(target)``), on the target's device and dtype, in eval mode. Every net's
output projection is the target's LM head restricted to ``vocab_ids`` (the frequent part of
the vocabulary, always including EOS): it cuts drafting cost several-fold on CPU and the
distributions stay exact (the draft distribution simply has no mass outside ``vocab_ids``).

Proposals. Every net returns a ``Draft``:
  * ``tokens``     LongTensor  [B, k]    draft token ids (full-vocabulary ids);
  * ``q``          FloatTensor [B, k, V] the exact distribution each token was drawn from,
                   over the target's full vocabulary V: one-hot for greedy drafting
                   (``temperature == 0``), ``softmax(logits / temperature)`` when sampling;
                   use this q, and no other, in the speculative-sampling ratio p/q;
  * ``confidence`` FloatTensor [B, k]    predicted probability that position i is accepted
                   given all earlier positions were (calibrated where the artifact carries
                   calibration; the scheduler's survival is S(i) = prod_{j<=i} confidence);
  * ``confidence_logit`` [B, k]          the raw, uncalibrated logit behind it.

  ParallelHeads (Scheme A, Medusa-style), one pass, no state::

      draft = heads.propose(hidden, last_token, k, temperature=0.0, generator=None)

    ``last_token`` and ``layers`` are accepted for a uniform interface and ignored (heads
    read h_p only).
    k <= heads.num_positions. Confidence = the head's max probability, Platt-calibrated
    per position.

  SemiARDrafter (Scheme B), one call, no state kept between calls::

      draft = semi.propose(hidden, last_token, k, temperature=0.0, generator=None,
                           layers=None)

    ``layers`` [B, n, H]: for a net with ``semi.feature_layers`` (e.g. [2, 15, 26]), the
    target's residual stream after those decoder layers at position p, HF's
    ``hidden_states[l + 1]`` (the engine's runner returns them with ``forward(layers=...)``);
    normed, projected and added to h_p before the backbone (EAGLE-3's low/mid/high fusion).
    ``hidden`` is h_p, or, for a net with a context layer (``semi.context``, a
    ``ContextEncoder``), h_p corrected by that layer: the engine's ``ContextHeadDrafter`` feeds
    the layer the hidden states of every committed position (its own one-layer KV cache) and
    passes ``semi.context.correct(h_p, out)``; over a whole sequence at once (training,
    evaluation) ``semi.context(hidden_seq, embed(next_tokens))`` gives the same values.
    Internally: a parallel backbone fuses h_p with the embedding of x[p+1] and gives every
    position its own state; a GRU cell (the lightweight sequential head, ReDrafter/Hydra
    family) walks the embeddings of x[p+1], d_1, ..., d_{k-1} so position i conditions on
    the draft tokens before it; a confidence head reads position i's state and its draft
    distribution's statistics (max prob, entropy, margin) and predicts acceptance of i,
    calibrated per position (Platt scaling, ``calib_a``/``calib_b`` buffers).

  DraftLM (the classic independent small draft model) keeps its own KV cache, which the
  engine owns and rolls back (``crop_cache(cache, length)`` below: transformers 5 ``crop``
  takes a negative count of tokens to remove)::

      out = draft_lm(input_ids, past_key_values=cache, use_cache=True)
      # out.logits [B, T, V] (full vocabulary, -inf outside vocab_ids), out.past_key_values

      draft, cache = draft_lm.propose(new_ids, cache, k, temperature=0.0, generator=None)
      # new_ids [B, T>=1]: committed tokens the draft cache has not seen yet (at least
      # last_token); afterwards the cache holds them plus d_1..d_{k-1}: after verification
      # crop it back to the committed length. Confidence = max prob (calibrated).

    Input embeddings are the target's (looked up, never stored); the transformer layers
    (a tiny Llama: 2-4 layers, hidden = the target's) are the draft model's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specd.worker.engine.api import TRAINED_DRAFTERS
from specd.worker.engine.kernels import Linear, linear
from specd.worker.engine.keyed import keyed_exponential, keyed_sample

Keys = tuple[list[int], list[int]]  # per row (seed, output position of the first draft)


def position_noise(keys: Keys | None, i: int, vocab_ids: torch.Tensor) -> torch.Tensor | None:
    """Keyed exponential noise [B, Vs] for draft position i of seeded rows (None: unseeded)."""
    if keys is None:
        return None
    seeds, positions = keys
    return keyed_exponential(seeds, [p + i for p in positions], vocab_ids)

METHODS = TRAINED_DRAFTERS


@dataclass
class Draft:
    """One round's proposal for a batch: see the module docstring."""

    tokens: torch.Tensor  # [B, k] long
    q: torch.Tensor | None  # [B, k, V] float: the exact distribution each token was drawn from
    # (None when the caller asked for no q: ``propose(..., with_q=False)``)
    confidence: torch.Tensor  # [B, k] float in [0, 1]
    confidence_logit: torch.Tensor | None = None  # [B, k] raw (uncalibrated) logit


def crop_cache(cache: Any, length: int) -> None:
    """Cut a transformers DynamicCache back to ``length`` tokens (no-op if not longer)."""
    remove = cache.get_seq_length() - length
    if remove > 0:
        cache.crop(-remove)


def target_parts(target: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(embedding weight [V, H], lm_head weight [V, H]) of a LoadedModel or a HF causal LM."""
    model = target.model if hasattr(target, "tokenizer") else target  # LoadedModel or HF model
    if hasattr(model, "get_input_embeddings") and getattr(model, "get_output_embeddings",
                                                          lambda: None)() is not None:
        return model.get_input_embeddings().weight, model.get_output_embeddings().weight
    raise TypeError("target must be a LoadedModel or a transformers causal LM")


def sample_from_logits(sub_logits: torch.Tensor, vocab_ids: torch.Tensor, vocab_size: int,
                       temperature: float, generator: torch.Generator | None = None,
                       with_q: bool = True, noise: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Pick tokens from sub-vocabulary logits [B, Vs]; return (ids [B], q [B, V] full vocab).

    Greedy (temperature 0) returns a one-hot q; sampling returns softmax(logits / T), the
    exact distribution the token was drawn from. ``with_q=False`` skips building q (greedy
    verification never reads it, and a dense [B, V] per position costs real time on CPU).
    ``noise`` [B, Vs]: keyed exponential noise at ``vocab_ids`` (seeded rows): the token is
    then the keyed sample argmax(q / E) instead of a draw from ``generator``.
    """
    if temperature <= 0.0:
        probs = None
        ids = vocab_ids[sub_logits.argmax(dim=-1)]
    else:
        probs = torch.softmax(sub_logits.float() / temperature, dim=-1)
        if noise is not None:
            ids = vocab_ids[keyed_sample(probs, noise)]
        else:
            ids = vocab_ids[torch.multinomial(probs, 1, generator=generator).squeeze(1)]
    if not with_q:
        return ids, None
    q = sub_logits.new_zeros(sub_logits.shape[0], vocab_size, dtype=torch.float32)
    if probs is None:
        q.scatter_(1, ids[:, None], 1.0)
    else:
        q.scatter_(1, vocab_ids[None, :].expand(len(ids), -1), probs)
    return ids, q


def distribution_stats(sub_logits: torch.Tensor) -> torch.Tensor:
    """[..., Vs] logits -> [..., 3] (max prob, normalised entropy, top1-top2 margin)."""
    logp = torch.log_softmax(sub_logits.float(), dim=-1)
    p = logp.exp()
    top2 = p.topk(2, dim=-1).values
    entropy = -(p * logp).sum(-1) / math.log(sub_logits.shape[-1])
    return torch.stack([top2[..., 0], entropy, top2[..., 0] - top2[..., 1]], dim=-1)


class ResBlock(nn.Module):
    """x + SiLU(W x + b), W zero-initialised so a fresh block is the identity (Medusa)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class _BoundHead(nn.Module):
    """Shared machinery: the target's embedding and a vocab-restricted copy of its LM head.

    Neither is a parameter or a persistent buffer, so artifacts never store target weights.
    """

    # target decoder layers whose residual stream the net reads besides h_p (none by default)
    feature_layers: list[int] = []

    def __init__(self, vocab_ids: torch.Tensor, vocab_size: int, num_positions: int) -> None:
        super().__init__()
        self.vocab_size = int(vocab_size)
        self.num_positions = int(num_positions)
        self.register_buffer("vocab_ids", vocab_ids.long().clone())
        # per-position Platt calibration of the confidence logit: sigmoid(a * z + b)
        self.register_buffer("calib_a", torch.ones(num_positions))
        self.register_buffer("calib_b", torch.zeros(num_positions))
        self.register_buffer("sub_head", torch.empty(0), persistent=False)
        self.register_buffer("embed_weight", torch.empty(0), persistent=False)

    @property
    def bound(self) -> bool:
        return self.sub_head.numel() > 0

    def bind(self, target: Any) -> _BoundHead:
        """Attach the target's frozen embedding and LM head rows; move to its device/dtype."""
        embed, head = target_parts(target)
        if head.shape[0] != self.vocab_size:
            raise ValueError(f"target vocabulary {head.shape[0]} != drafter's {self.vocab_size}")
        self.to(device=head.device, dtype=head.dtype)
        self.vocab_ids = self.vocab_ids.to(head.device)
        self.sub_head = head.detach()[self.vocab_ids].contiguous()
        self.embed_weight = embed.detach()  # shared, not copied
        return self

    def _check_bound(self) -> None:
        if not self.bound:
            raise RuntimeError(f"{type(self).__name__} is not bound to a target: call .bind(target)")

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """Hidden [..., H] -> sub-vocabulary logits [..., Vs] through the target's LM head."""
        return linear(x, self.sub_head)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.embed_weight)

    def calibrate(self, conf_logit: torch.Tensor) -> torch.Tensor:
        """Raw confidence logits [B, k] -> calibrated probabilities [B, k]."""
        k = conf_logit.shape[-1]
        # positions past the calibrated range reuse the last position's parameters
        idx = torch.arange(k, device=conf_logit.device).clamp(max=self.num_positions - 1)
        return torch.sigmoid(self.calib_a[idx] * conf_logit.float() + self.calib_b[idx])

    def sub_index(self) -> torch.Tensor:
        """Full-vocab id -> sub-vocab index (-1 outside), for training targets."""
        table = torch.full((self.vocab_size,), -1, dtype=torch.long, device=self.vocab_ids.device)
        table[self.vocab_ids] = torch.arange(len(self.vocab_ids), device=self.vocab_ids.device)
        return table


def _max_prob_logit(sub_logits: torch.Tensor) -> torch.Tensor:
    """logit(max prob) of sub-vocab logits: the raw confidence of heads without a conf net."""
    p = torch.softmax(sub_logits.float(), dim=-1).amax(-1).clamp(1e-6, 1 - 1e-6)
    return torch.log(p) - torch.log1p(-p)


class ParallelHeads(_BoundHead):
    """Scheme A: K independent Medusa heads on h_p; head i predicts x[p+1+i]."""

    def __init__(self, hidden_size: int, num_positions: int, vocab_ids: torch.Tensor,
                 vocab_size: int, num_layers: int = 1) -> None:
        super().__init__(vocab_ids, vocab_size, num_positions)
        self.config = {"hidden_size": hidden_size, "num_positions": num_positions,
                       "vocab_size": vocab_size, "num_vocab": int(len(vocab_ids)),
                       "num_layers": num_layers}
        self.heads = nn.ModuleList(
            nn.Sequential(*[ResBlock(hidden_size) for _ in range(num_layers)])
            for _ in range(num_positions))

    def forward(self, hidden: torch.Tensor, k: int | None = None) -> torch.Tensor:
        """hidden [B, H] -> sub-vocabulary logits [B, k, Vs] (k defaults to all heads)."""
        self._check_bound()
        k = self.num_positions if k is None else k
        states = torch.stack([self.heads[i](hidden) for i in range(k)], dim=1)
        return self.project(states)

    @torch.no_grad()
    def propose(self, hidden: torch.Tensor, last_token: torch.Tensor | None, k: int,
                temperature: float = 0.0, generator: torch.Generator | None = None,
                with_q: bool = True, layers: torch.Tensor | None = None,
                keys: Keys | None = None) -> Draft:
        """``keys``: seeded rows' (seeds, positions): draw with keyed noise (module doc)."""
        if not 1 <= k <= self.num_positions:
            raise ValueError(f"k must be in 1..{self.num_positions}, got {k}")
        logits = self.forward(hidden.to(self.sub_head.dtype), k)
        tokens, qs = [], []
        for i in range(k):
            ids, q = sample_from_logits(logits[:, i], self.vocab_ids, self.vocab_size,
                                        temperature, generator, with_q,
                                        position_noise(keys, i, self.vocab_ids))
            tokens.append(ids)
            qs.append(q)
        z = _max_prob_logit(logits)
        return Draft(torch.stack(tokens, 1), _stack_q(qs), self.calibrate(z), z)


def _llama_config(hidden_size: int, num_layers: int, num_heads: int, num_kv_heads: int,
                  intermediate_size: int, rope_theta: float, rms_norm_eps: float,
                  max_position_embeddings: int) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=1, hidden_size=hidden_size, num_hidden_layers=num_layers,
                       num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                       intermediate_size=intermediate_size, rms_norm_eps=rms_norm_eps,
                       max_position_embeddings=max_position_embeddings, rope_theta=rope_theta,
                       pad_token_id=None, bos_token_id=None, eos_token_id=None,
                       tie_word_embeddings=False)


def context_config(target_config: Any) -> dict[str, Any]:
    """A context layer shaped like one of the target's decoder layers."""
    rope = getattr(target_config, "rope_parameters", None) or {}
    return {"num_heads": target_config.num_attention_heads,
            "num_kv_heads": target_config.num_key_value_heads,
            "intermediate_size": target_config.intermediate_size,
            "rope_theta": float(rope.get("rope_theta", getattr(target_config, "rope_theta", 1e4))),
            "rms_norm_eps": target_config.rms_norm_eps}


class ContextEncoder(nn.Module):
    """EAGLE-style feature attention: one decoder layer over the target's own features.

    Input at position t: u_t = W [h_t ; norm(e(x[t+1]))] (the target's final-norm hidden state
    and the token that followed it); one causal Llama decoder layer with its own KV cache
    reads u_0..u_t; the output, normed and projected (zero-initialised), corrects h_t:
    h'_t = h_t + P norm(layer(u)_t). With P = 0 the drafter above it sees plain h_t, so the
    context layer starts as a no-op and learns what attention over earlier positions adds
    (copying from the prompt, structure, repeated names) that h_t alone does not carry.
    At run time the layer runs through the engine's ragged forward (``runner()``), fed only
    committed positions, so its cache never needs rolling back.
    """

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int,
                 intermediate_size: int, rope_theta: float, rms_norm_eps: float = 1e-5,
                 max_position_embeddings: int = 8192) -> None:
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        self.llama_config = _llama_config(hidden_size, 1, num_heads, num_kv_heads,
                                          intermediate_size, rope_theta, rms_norm_eps,
                                          max_position_embeddings)
        h = hidden_size
        self.tok_norm = nn.RMSNorm(h, eps=rms_norm_eps)
        self.fc = Linear(2 * h, h, bias=False)
        self.layer = LlamaDecoderLayer(self.llama_config, layer_idx=0)
        self.norm = nn.RMSNorm(h, eps=rms_norm_eps)
        self.proj = Linear(h, h, bias=False)
        nn.init.zeros_(self.proj.weight)
        self.rotary = LlamaRotaryEmbedding(self.llama_config)
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = h // num_heads

    def inputs(self, hidden: torch.Tensor, next_emb: torch.Tensor) -> torch.Tensor:
        """[..., H] features and embeddings of the tokens that followed them -> layer inputs."""
        return self.fc(torch.cat([hidden, self.tok_norm(next_emb)], dim=-1))

    def correct(self, hidden: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Features and the (normed) layer outputs at the same positions -> corrected features."""
        return hidden + self.proj(out)

    def forward(self, hidden: torch.Tensor, next_emb: torch.Tensor,
                lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Training / evaluation over whole sequences: hidden, next_emb [B, T, H] (right
        padded to ``lengths``) -> corrected features [B, T, H] (causal: t sees 0..t)."""
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        b, t, _ = hidden.shape
        x = self.inputs(hidden, next_emb)
        pos = torch.arange(t, device=x.device)[None].expand(b, -1)
        cos, sin = self.rotary(x, pos)
        layer = self.layer
        att = layer.self_attn
        y = layer.input_layernorm(x)
        q = att.q_proj(y).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = att.k_proj(y).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = att.v_proj(y).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        if lengths is not None:  # padded keys masked; padded queries see key 0 (never NaN)
            keys_ok = torch.arange(t, device=x.device)[None] < lengths[:, None]
            mask = (mask[None] & keys_ok[:, None, :])
            mask[..., 0] = True
            mask = mask[:, None]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        x = x + att.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.correct(hidden, self.norm(x))

    def runner(self, embed_weight: torch.Tensor) -> Any:
        """The engine's batched forward over this one layer (inputs come as ``Row.embeds``)."""
        from specd.worker.engine.llama import LlamaRunner

        w = self.fc.weight
        return LlamaRunner.from_parts(self.llama_config, embed_weight, [self.layer],
                                      self.norm.weight, self.rotary, w.new_zeros(1, w.shape[0]))


class SemiARDrafter(_BoundHead):
    """Scheme B: parallel backbone + GRU sequential head + confidence head.

    Input: h = h_p, plus L [norm(f_l1) ; ... ] with the optional ``feature_layers`` f.
    Backbone (parallel over positions): z = h + SiLU(W [h ; norm(e(x[p+1]))]), with the
    optional ``backbone_mlp`` (width m) z += D(SiLU(G x) * U x), x = [norm(z) ; norm(e(x[p+1]))]
    (a SwiGLU MLP like one of the target's, D zero-initialised); position i's
    base state s_i = z + P_i. Sequential head: g_0 = tanh(G z); g_i = GRU(norm(e(prev_i)),
    g_{i-1}) with prev_1 = x[p+1], prev_i = d_{i-1}; o_i = ResBlock(s_i + U g_i);
    logits_i = lm_head_sub(o_i). Confidence: MLP([V o_i ; stats(logits_i) ; onehot(i)]) on
    detached inputs, so it predicts acceptance without bending the drafter.
    """

    def __init__(self, hidden_size: int, num_positions: int, vocab_ids: torch.Tensor,
                 vocab_size: int, gru_size: int = 256, conf_size: int = 64,
                 context: dict[str, Any] | None = None,
                 feature_layers: list[int] | None = None, backbone_mlp: int = 0) -> None:
        super().__init__(vocab_ids, vocab_size, num_positions)
        self.config = {"hidden_size": hidden_size, "num_positions": num_positions,
                       "vocab_size": vocab_size, "num_vocab": int(len(vocab_ids)),
                       "gru_size": gru_size, "conf_size": conf_size}
        h = hidden_size
        # optional SwiGLU MLP in the backbone: the first draft position must guess what the
        # target makes of x[p+1] without running it, and one linear layer over [h ; e] is
        # little room for that; it runs once per round, not once per position
        self.backbone_mlp = backbone_mlp
        if backbone_mlp:
            self.config["backbone_mlp"] = backbone_mlp
            self.mlp_norm = nn.RMSNorm(h, eps=1e-5)
            self.mlp_in = Linear(2 * h, 2 * backbone_mlp, bias=False)
            self.mlp_out = Linear(backbone_mlp, h, bias=False)
            nn.init.zeros_(self.mlp_out.weight)  # a warm start is exactly its source at step 0
        # optional EAGLE-style context layer in front of the backbone (``ContextEncoder``):
        # its kwargs, e.g. {"num_heads": 9, "num_kv_heads": 3, "intermediate_size": 1536,
        # "rope_theta": 1e5}; None = the backbone reads h_p alone
        self.context = None
        if context and feature_layers:
            raise ValueError("a semi-ar net reads either a context layer or feature layers")
        if context:
            self.config["context"] = dict(context)
            self.context = ContextEncoder(hidden_size, **context)
        # optional EAGLE-3-style fused features: the target's residual stream after these
        # decoder layers (low / middle / high), normed, projected and added to h_p
        # (zero-initialised: a net without them is the starting point)
        self.feature_layers = list(feature_layers or [])
        if self.feature_layers:
            self.config["feature_layers"] = self.feature_layers
            n = len(self.feature_layers)
            self.layer_norm_w = nn.Parameter(torch.ones(n, h))
            self.layer_proj = Linear(n * h, h)
            nn.init.zeros_(self.layer_proj.weight)
            nn.init.zeros_(self.layer_proj.bias)
        self.tok_norm = nn.RMSNorm(h, eps=1e-5)
        self.fuse = Linear(2 * h, h)
        nn.init.zeros_(self.fuse.weight)
        nn.init.zeros_(self.fuse.bias)
        self.pos = nn.Parameter(torch.zeros(num_positions, h))
        self.g0 = Linear(h, gru_size)
        self.gru = nn.GRUCell(h, gru_size)
        self.up = Linear(gru_size, h)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)
        self.block = ResBlock(h)
        self.block2 = ResBlock(h)
        self.conf_proj = Linear(h, conf_size)
        self.conf_mlp = nn.Sequential(Linear(conf_size + 3 + num_positions, conf_size),
                                      nn.SiLU(), Linear(conf_size, 1))

    def fuse_layers(self, hidden: torch.Tensor, layers: torch.Tensor | None) -> torch.Tensor:
        """h_p [B, H] and the residual stream after ``feature_layers`` [B, n, H] -> the
        backbone's input (h_p itself for a net without feature layers)."""
        if not self.feature_layers:
            return hidden
        if layers is None or layers.shape[-2] != len(self.feature_layers):
            raise ValueError(f"this drafter reads target layers {self.feature_layers}")
        lf = layers.to(hidden.dtype).float()
        lf = lf * torch.rsqrt(lf.pow(2).mean(-1, keepdim=True) + 1e-5)
        normed = (lf.to(hidden.dtype) * self.layer_norm_w).flatten(-2)
        return hidden + self.layer_proj(normed)

    def _backbone(self, hidden: torch.Tensor, last_token: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        e = self.tok_norm(self.embed(last_token))
        z = hidden + F.silu(self.fuse(torch.cat([hidden, e], dim=-1)))
        if self.backbone_mlp:
            gate, up = self.mlp_in(torch.cat([self.mlp_norm(z), e], dim=-1)).chunk(2, dim=-1)
            z = z + self.mlp_out(F.silu(gate) * up)
        return z, torch.tanh(self.g0(z))

    def _position(self, z: torch.Tensor, g: torch.Tensor, i: int) -> torch.Tensor:
        return self.block2(self.block(z + self.pos[i] + self.up(g)))

    def _confidence_logits(self, states: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """States [B, k, H] and their sub-vocab logits [B, k, Vs] -> raw logits [B, k]."""
        k = states.shape[1]
        onehot = torch.eye(self.num_positions, dtype=states.dtype, device=states.device)[:k]
        feats = torch.cat([self.conf_proj(states.detach()),
                           distribution_stats(logits.detach()).to(states.dtype),
                           onehot[None].expand(states.shape[0], -1, -1)], -1)
        return self.conf_mlp(feats).squeeze(-1)

    def forward(self, hidden: torch.Tensor, prev_tokens: torch.Tensor,
                layers: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced pass. prev_tokens [B, k]: x[p+1], then the tokens before each position.

        Returns (sub-vocabulary logits [B, k, Vs], raw confidence logits [B, k]).
        """
        self._check_bound()
        k = prev_tokens.shape[1]
        z, g = self._backbone(self.fuse_layers(hidden, layers), prev_tokens[:, 0])
        emb = self.tok_norm(self.embed(prev_tokens))
        gs = []
        for i in range(k):  # only the GRU is sequential; the rest runs for all positions
            g = self.gru(emb[:, i], g)
            gs.append(g)
        states = self.block2(self.block(z[:, None] + self.pos[:k] + self.up(torch.stack(gs, 1))))
        logits = self.project(states)
        return logits, self._confidence_logits(states, logits)

    @torch.no_grad()
    def propose(self, hidden: torch.Tensor, last_token: torch.Tensor, k: int,
                temperature: float = 0.0, generator: torch.Generator | None = None,
                with_q: bool = True, layers: torch.Tensor | None = None,
                keys: Keys | None = None) -> Draft:
        """``keys``: seeded rows' (seeds, positions): draw with keyed noise (module doc)."""
        self._check_bound()
        if not 1 <= k <= self.num_positions:
            raise ValueError(f"k must be in 1..{self.num_positions}, got {k}")
        hidden = self.fuse_layers(hidden.to(self.sub_head.dtype), layers)
        z, g = self._backbone(hidden, last_token)
        prev = last_token
        tokens, qs, states, subs = [], [], [], []
        for i in range(k):  # only what the next position needs runs inside the loop
            g = self.gru(self.tok_norm(self.embed(prev)), g)
            state = self._position(z, g, i)
            sub = self.project(state)
            prev, q = sample_from_logits(sub, self.vocab_ids, self.vocab_size, temperature,
                                         generator, with_q,
                                         position_noise(keys, i, self.vocab_ids))
            tokens.append(prev)
            qs.append(q)
            states.append(state)
            subs.append(sub)
        z = self._confidence_logits(torch.stack(states, 1), torch.stack(subs, 1)).float()
        return Draft(torch.stack(tokens, 1), _stack_q(qs), self.calibrate(z), z)


def _stack_q(qs: list[torch.Tensor | None]) -> torch.Tensor | None:
    return None if any(q is None for q in qs) else torch.stack(qs, 1)  # type: ignore[misc]


class DraftLM(_BoundHead):
    """A tiny independent Llama (own layers and final norm, the target's embeddings/LM head).

    Calibration buffers hold per-position Platt parameters for the max-prob confidence.
    """

    def __init__(self, hidden_size: int, num_positions: int, vocab_ids: torch.Tensor,
                 vocab_size: int, num_layers: int = 2, num_heads: int = 9,
                 num_kv_heads: int = 3, intermediate_size: int = 1536,
                 rope_theta: float = 100000.0, rms_norm_eps: float = 1e-5,
                 max_position_embeddings: int = 8192) -> None:
        super().__init__(vocab_ids, vocab_size, num_positions)
        from transformers import LlamaModel

        self.config = {"hidden_size": hidden_size, "num_positions": num_positions,
                       "vocab_size": vocab_size, "num_vocab": int(len(vocab_ids)),
                       "num_layers": num_layers, "num_heads": num_heads,
                       "num_kv_heads": num_kv_heads, "intermediate_size": intermediate_size,
                       "rope_theta": rope_theta, "rms_norm_eps": rms_norm_eps,
                       "max_position_embeddings": max_position_embeddings}
        cfg = _llama_config(hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size,
                            rope_theta, rms_norm_eps, max_position_embeddings)
        self.llama = LlamaModel(cfg)  # embeddings come from the target (inputs_embeds)
        self.llama.embed_tokens = None

    def sub_logits(self, input_ids: torch.Tensor, past_key_values: Any = None,
                   use_cache: bool = True, attention_mask: torch.Tensor | None = None,
                   position_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        """input_ids [B, T] -> (sub-vocabulary logits [B, T, Vs], cache)."""
        self._check_bound()
        out = self.llama(inputs_embeds=self.embed(input_ids), past_key_values=past_key_values,
                         use_cache=use_cache, attention_mask=attention_mask,
                         position_ids=position_ids)
        return self.project(out.last_hidden_state), out.past_key_values

    def forward(self, input_ids: torch.Tensor, past_key_values: Any = None,
                use_cache: bool = True, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> Any:
        """HF-style: returns an object with .logits [B, T, V] (full vocab) and .past_key_values."""
        from transformers.modeling_outputs import CausalLMOutputWithPast

        sub, cache = self.sub_logits(input_ids, past_key_values, use_cache, attention_mask,
                                     position_ids)
        full = sub.new_full((*sub.shape[:-1], self.vocab_size), float("-inf"))
        full[..., self.vocab_ids] = sub
        return CausalLMOutputWithPast(logits=full, past_key_values=cache)

    @torch.no_grad()
    def propose(self, new_ids: torch.Tensor, cache: Any, k: int, temperature: float = 0.0,
                generator: torch.Generator | None = None) -> tuple[Draft, Any]:
        """Feed committed tokens the cache lacks, then draft k tokens (see module docstring)."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if cache is None:
            from transformers import DynamicCache

            cache = DynamicCache()
        sub, cache = self.sub_logits(new_ids, cache)
        last = sub[:, -1]
        tokens, qs, confs = [], [], []
        for i in range(k):
            ids, q = sample_from_logits(last, self.vocab_ids, self.vocab_size, temperature,
                                        generator)
            tokens.append(ids)
            qs.append(q)
            confs.append(_max_prob_logit(last))
            if i + 1 < k:
                sub, cache = self.sub_logits(ids[:, None], cache)
                last = sub[:, -1]
        z = torch.stack(confs, 1).float()
        return Draft(torch.stack(tokens, 1), torch.stack(qs, 1), self.calibrate(z), z), cache


NETS: dict[str, type[_BoundHead]] = {
    "parallel": ParallelHeads,
    "semi-ar": SemiARDrafter,
    "draft-model": DraftLM,
}


def build_net(method: str, config: dict[str, Any]) -> _BoundHead:
    """Construct an unbound net of ``method`` from its saved config (vocab_ids come later)."""
    if method not in NETS:
        raise ValueError(f"unknown drafter method {method!r}: one of {', '.join(METHODS)}")
    cfg = dict(config)
    num_vocab = cfg.pop("num_vocab")
    return NETS[method](vocab_ids=torch.zeros(num_vocab, dtype=torch.long), **cfg)
