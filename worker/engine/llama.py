"""A small batched Llama forward over a Hugging Face Llama model's weights.

Why our own forward: continuous batching with ragged new-token counts per request, a slot-based
KV cache with rollback by length, logits only where they are needed (the lm_head is the most
expensive matmul of a small model on CPU) and the final-norm hidden state for the drafters.
The math is HF's: RMSNorm in float32, RoPE from the model's own rotary module (so any rope
config the model declares applies), grouped-query attention via SDPA, SiLU-gated MLP, tied or
untied lm_head. ``tests/engine`` checks logits against the HF model.

Linear layers run on the flat token list (no padding); only attention groups rows: one-token
rows (decode) run together, short multi-token rows (verify) are padded together, long rows
(prefill chunks) run alone, so neither a prefill chunk nor a few rows verifying drafts pad
every decode row to their length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.nn.functional as F

from specd.worker.engine.kernels import linear
from specd.worker.engine.kv_cache import KVCache

if TYPE_CHECKING:
    from specd.worker.engine.scheduler import CostTable

Want = Literal["all", "last", "none"]
SHORT_ROW = 32  # rows of 2..SHORT_ROW new tokens share one padded attention call


@dataclass
class Row:
    """New tokens of one request for this forward; they are appended to the slot's cache."""

    slot: int
    tokens: list[int]
    want: Want = "all"  # which positions return hidden states and logits
    # input vectors [len(tokens), hidden] used instead of the token embeddings (a drafter's
    # context layer feeds fused target features); ``tokens`` then only sets the count
    embeds: torch.Tensor | None = None


@dataclass
class ForwardOutput:
    hidden: torch.Tensor  # [M, hidden] final-norm hidden states (lm_head input)
    logits: torch.Tensor | None  # [M, vocab] float32, None when not asked for
    starts: list[int]  # row r's outputs are hidden[starts[r] : starts[r] + counts[r]]
    counts: list[int]
    # with ``forward(..., all_hidden=True)``: final-norm hidden of every token run, row r's
    # real tokens at all_hidden[flat_starts[r] : flat_starts[r] + len(rows[r].tokens)]
    all_hidden: torch.Tensor | None = None
    flat_starts: list[int] | None = None
    # with ``forward(..., layers=(l1, l2, ...))``: the residual stream after each of those
    # decoder layers (0-based) at the wanted positions, [M, len(layers), hidden]
    layer_hidden: torch.Tensor | None = None


class LlamaRunner:
    """Batched forward of a (HF) Llama causal LM with a KVCache."""

    def __init__(self, hf_model: Any) -> None:
        cfg = hf_model.config
        if getattr(cfg, "model_type", None) not in ("llama", "mistral", "qwen2"):
            raise ValueError(f"LlamaRunner supports Llama-architecture models, got {cfg.model_type!r}")
        inner = hf_model.model
        self._setup(cfg, inner.embed_tokens.weight, inner.layers, inner.norm.weight,
                    inner.rotary_emb, hf_model.lm_head.weight)

    @classmethod
    def from_parts(cls, config: Any, embed: torch.Tensor, layers: Any, norm_weight: torch.Tensor,
                   rotary: Any, lm_head: torch.Tensor) -> LlamaRunner:
        """A runner over explicit parts (e.g. a draft LM that borrows the target's embedding
        and a vocabulary-restricted LM head)."""
        runner = cls.__new__(cls)
        runner._setup(config, embed, layers, norm_weight, rotary, lm_head)
        return runner

    def _setup(self, cfg: Any, embed: torch.Tensor, layers: Any, norm_weight: torch.Tensor,
               rotary: Any, lm_head: torch.Tensor) -> None:
        self.config = cfg
        self.num_layers = cfg.num_hidden_layers
        self.num_heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.hidden_size = cfg.hidden_size
        self.vocab_size = lm_head.shape[0]
        self.eps = cfg.rms_norm_eps
        self.embed = embed
        self.dtype = lm_head.dtype
        self.device = lm_head.device
        self.rotary = rotary
        self.norm_w = norm_weight
        self.lm_head = lm_head
        self.layers = []
        for layer in layers:
            att, mlp = layer.self_attn, layer.mlp
            if getattr(att.q_proj, "bias", None) is not None:
                qkv_b = torch.cat([att.q_proj.bias, att.k_proj.bias, att.v_proj.bias])
            else:
                qkv_b = None
            w_qkv = _fuse([att.q_proj, att.k_proj, att.v_proj])
            w_gu = _fuse([mlp.gate_proj, mlp.up_proj])
            self.layers.append((layer.input_layernorm.weight, w_qkv, qkv_b, att.o_proj.weight,
                                layer.post_attention_layernorm.weight, w_gu,
                                mlp.down_proj.weight))
        # forward sizes to pad to (index: real token count - 1); set from the measured
        # CostTable (``set_padding``), empty = never pad. A lone row has its own: the main
        # table's small sizes are that many one-token rows, another shape with other steps
        self.pad_to: tuple[int, ...] = ()
        self.pad_to_one_row: tuple[int, ...] = ()
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.kv_heads * self.head_dim
        self.ffn = cfg.intermediate_size

    def set_padding(self, costs: CostTable) -> None:
        """Pad forwards as the measured table says is cheaper (``CostTable.pad_to``; one
        row by the one-row table's, when measured)."""
        self.pad_to = costs.pad_to
        self.pad_to_one_row = costs.one_row_pad_to()

    def new_cache(self, slots: int, max_context: int) -> KVCache:
        return KVCache(self.num_layers, slots, max_context, self.kv_heads, self.head_dim,
                       self.dtype, self.device)

    def cache_bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.kv_size * torch.finfo(self.dtype).bits // 8

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * xf.to(x.dtype)

    @torch.inference_mode()
    def forward(self, cache: KVCache, rows: list[Row], logits: bool = True,
                all_hidden: bool = False, layers: tuple[int, ...] = ()) -> ForwardOutput:
        """Append each row's tokens to its slot and return outputs for the wanted positions
        (and, with ``all_hidden``, the final-norm hidden state of every token; with
        ``layers``, the residual stream after those decoder layers at the wanted positions)."""
        dev = self.device
        n_rows = len(rows)
        counts_in = [len(r.tokens) for r in rows]
        if n_rows == 0 or min(counts_in) == 0:
            raise ValueError("every row needs at least one new token")
        outside = [li for li in layers if not 0 <= li < self.num_layers]
        if outside:
            raise ValueError(f"layers {outside} are outside 0..{self.num_layers - 1}")
        starts_in = [cache.lengths[r.slot] for r in rows]
        for r, s, n in zip(rows, starts_in, counts_in, strict=True):
            if s + n > cache.max_context:
                raise ValueError(f"slot {r.slot}: {s}+{n} tokens exceed max_context {cache.max_context}")
        counts_fwd = self._padded_counts(cache, starts_in, counts_in)
        flat_tokens: list[int] = []
        flat_pos: list[int] = []
        flat_slot: list[int] = []
        for r, s, n, nf in zip(rows, starts_in, counts_in, counts_fwd, strict=True):
            # pad tokens repeat the row's last token past its real ones: their K/V land
            # beyond the slot's length (like rolled-back drafts) and no output reads them
            flat_tokens.extend(r.tokens + r.tokens[-1:] * (nf - n))
            flat_pos.extend(range(s, s + nf))
            flat_slot.extend([r.slot] * nf)
        total = len(flat_tokens)
        tok = torch.tensor(flat_tokens, device=dev)
        pos = torch.tensor(flat_pos, device=dev)
        slot_t = torch.tensor(flat_slot, device=dev)

        # outputs wanted
        out_idx: list[int] = []
        out_starts: list[int] = []
        out_counts: list[int] = []
        flat_starts: list[int] = []  # where each row's tokens start in the flat batch
        offset = 0
        for r, n, nf in zip(rows, counts_in, counts_fwd, strict=True):
            out_starts.append(len(out_idx))
            flat_starts.append(offset)
            if r.want == "all":
                out_idx.extend(range(offset, offset + n))
            elif r.want == "last":
                out_idx.append(offset + n - 1)
            out_counts.append(len(out_idx) - out_starts[-1])
            offset += nf

        groups = self._attention_groups(rows, starts_in, counts_fwd)

        x = self._inputs(rows, tok, counts_in, counts_fwd)
        cos, sin = self.rotary(x[None], pos[None])  # [1, total, head_dim]
        cos = cos[0][:, None, :]
        sin = sin[0][:, None, :]
        nh, kvh, hd = self.num_heads, self.kv_heads, self.head_dim
        out_sel = torch.tensor(out_idx, dtype=torch.long, device=dev)
        captured: dict[int, torch.Tensor] = {}
        for li, (ln1, w_qkv, b_qkv, w_o, ln2, w_gu, w_down) in enumerate(self.layers):
            h = self._rms(x, ln1)
            qkv = linear(h, w_qkv, b_qkv)
            q = qkv[:, : self.q_size].view(total, nh, hd)
            k = qkv[:, self.q_size: self.q_size + self.kv_size].view(total, kvh, hd)
            v = qkv[:, self.q_size + self.kv_size:].view(total, kvh, hd)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            ck, cv = cache.k[li], cache.v[li]
            ck[slot_t, :, pos] = k
            cv[slot_t, :, pos] = v
            attn = torch.empty(total, nh, hd, dtype=x.dtype, device=dev)
            for g in groups:
                attn[g.flat_index] = g.attend(q, ck, cv)
            x = x + linear(attn.view(total, self.q_size), w_o)
            h = self._rms(x, ln2)
            gu = linear(h, w_gu)
            x = x + linear(F.silu(gu[:, : self.ffn]) * gu[:, self.ffn:], w_down)
            if li in layers:
                captured[li] = x[out_sel]

        for r, n in zip(rows, counts_in, strict=True):
            cache.lengths[r.slot] += n
        flat_hidden = self._rms(x, self.norm_w) if all_hidden else None
        if flat_hidden is not None:
            hidden = flat_hidden[out_sel]
        else:
            hidden = self._rms(x[out_sel] if len(out_idx) != total else x, self.norm_w)
        out_logits = linear(hidden, self.lm_head).float() if (logits and out_idx) else None
        layer_hidden = torch.stack([captured[li] for li in layers], 1) if layers else None
        return ForwardOutput(hidden, out_logits, out_starts, out_counts, flat_hidden,
                             flat_starts if all_hidden else None, layer_hidden)

    def _inputs(self, rows: list[Row], tok: torch.Tensor, counts: list[int],
                counts_fwd: list[int]) -> torch.Tensor:
        """Token embeddings, or the rows' own input vectors where they bring them."""
        if all(r.embeds is None for r in rows):
            return F.embedding(tok, self.embed)
        parts, offset = [], 0
        for r, n, nf in zip(rows, counts, counts_fwd, strict=True):
            if r.embeds is None:
                e = F.embedding(tok[offset: offset + nf], self.embed)
            else:
                if r.embeds.shape[0] != n:
                    raise ValueError(f"slot {r.slot}: {r.embeds.shape[0]} input vectors for {n} tokens")
                e = r.embeds.to(self.dtype)
                if nf > n:  # padding repeats the last input, like the token padding
                    e = torch.cat([e, e[-1:].expand(nf - n, -1)])
            parts.append(e)
            offset += nf
        return torch.cat(parts)

    def _padded_counts(self, cache: KVCache, starts: list[int], counts: list[int]) -> list[int]:
        """Per-row token counts to run: ``counts`` plus ``pad_to``'s padding on the row with
        the most context room (no padding when no row has room for it)."""
        total = sum(counts)
        pad_to = self.pad_to_one_row if len(counts) == 1 and self.pad_to_one_row else self.pad_to
        if total > len(pad_to) or pad_to[total - 1] <= total:
            return counts
        extra = pad_to[total - 1] - total
        room = [cache.max_context - s - n for s, n in zip(starts, counts, strict=True)]
        r = max(range(len(counts)), key=room.__getitem__)
        if room[r] < extra:
            return counts
        padded = list(counts)
        padded[r] += extra
        return padded

    def _attention_groups(self, rows: list[Row], starts: list[int], counts: list[int]) -> list[_Group]:
        dev = self.device
        offsets = [0]
        for n in counts:
            offsets.append(offsets[-1] + n)
        by_slot = sorted(range(len(rows)), key=lambda i: rows[i].slot)
        # one-token rows (decode) attend apart from short multi-token rows (verify): padded
        # together, every decode row would run as many queries as the longest verify row,
        # and SDPA over one query a row is far cheaper (docs/bench/verify_shape_cost.py)
        parts = [[i for i in by_slot if counts[i] == 1],
                 [i for i in by_slot if 1 < counts[i] <= SHORT_ROW]]
        parts += [[i] for i in by_slot if counts[i] > SHORT_ROW]
        return [_Group.build([rows[i].slot for i in part], [starts[i] for i in part],
                             [counts[i] for i in part], [offsets[i] for i in part], dev)
                for part in parts if part]


@torch.no_grad()
def _fuse(linears: list[Any]) -> torch.Tensor:
    """Concatenate the weights of linears sharing an input into one matrix (one matmul instead
    of several), then point each module's weight at its slice of it, so the model keeps
    working and the weights are not held twice."""
    weights = [lin.weight for lin in linears]
    done = getattr(linears[0], "_specd_fused", None)
    if done is not None and weights[0].data_ptr() == done.data_ptr():
        return done  # an earlier runner over the same model fused these already
    fused = torch.cat(weights)
    row = 0
    for lin, w in zip(linears, weights, strict=True):
        lin.weight.data = fused[row: row + w.shape[0]]
        row += w.shape[0]
    linears[0]._specd_fused = fused
    return fused


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@dataclass
class _Group:
    """Rows whose attention runs as one padded SDPA call.

    Rows on a contiguous range of slots read the cache as a view; rows on scattered slots
    copy their keys and values out of it every layer, which on a CPU costs a busy batch
    more than its attention (``docs/bench/slot_layout_cost.py``). One-token rows with a few
    gaps between their slots (the rows beside those verifying drafts) therefore attend over
    the whole range, a masked dummy query in each gap, as long as the gaps are no more than
    the rows (the dummies' attention then costs no more than the copy it replaces)."""

    slots: torch.Tensor | slice
    gather: torch.Tensor  # [B, n_max] flat index of each padded query (pads repeat a real one)
    valid: torch.Tensor  # [B, n_max] bool
    flat_index: torch.Tensor  # flat indices of valid queries, in (row, position) order
    mask: torch.Tensor  # [B, 1, n_max, ctx] bool
    ctx: int

    @staticmethod
    def build(slots: list[int], starts: list[int], counts: list[int], offsets: list[int],
              dev: torch.device) -> _Group:
        """``slots`` ascending, one per row."""
        b = len(slots)
        lo, span = slots[0], slots[-1] - slots[0] + 1
        if span == b:
            return _Group._make(slice(lo, lo + b), starts, counts, offsets, [True] * b, dev)
        if max(counts) == 1 and span - b <= b:
            row_at = {slot: i for i, slot in enumerate(slots)}
            at = [row_at.get(slot) for slot in range(lo, lo + span)]
            # a gap's dummy query sits at position 0 (it sees key 0: no empty softmax row)
            return _Group._make(slice(lo, lo + span),
                                [0 if i is None else starts[i] for i in at], [1] * span,
                                [offsets[0] if i is None else offsets[i] for i in at],
                                [i is not None for i in at], dev)
        return _Group._make(torch.tensor(slots, device=dev), starts, counts, offsets,
                            [True] * b, dev)

    @staticmethod
    def _make(slot_sel: torch.Tensor | slice, starts: list[int], counts: list[int],
              offsets: list[int], real: list[bool], dev: torch.device) -> _Group:
        n_max = max(counts)
        ctx = max(s + n for s, n, r in zip(starts, counts, real, strict=True) if r)
        j = torch.arange(n_max, device=dev)
        cnt = torch.tensor(counts, device=dev)
        off = torch.tensor(offsets, device=dev)
        st = torch.tensor(starts, device=dev)
        valid = (j[None, :] < cnt[:, None]) & torch.tensor(real, device=dev)[:, None]
        gather = off[:, None] + torch.minimum(j[None, :], cnt[:, None] - 1)
        qpos = st[:, None] + j[None, :]  # absolute position of each query
        keys = torch.arange(ctx, device=dev)
        mask = (keys[None, None, :] <= qpos[:, :, None])[:, None]
        return _Group(slot_sel, gather, valid, gather[valid], mask, ctx)

    def attend(self, q: torch.Tensor, ck: torch.Tensor, cv: torch.Tensor) -> torch.Tensor:
        qb = q[self.gather].transpose(1, 2)  # [B, nh, n_max, hd]
        kb = ck[self.slots, :, : self.ctx]
        vb = cv[self.slots, :, : self.ctx]
        out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=self.mask, enable_gqa=True)
        return out.transpose(1, 2)[self.valid]  # [n_valid, nh, hd]
