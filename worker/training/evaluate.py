"""Evaluate drafters against the target on held-out prompts with a real greedy verify loop.

Per prompt:
1. a real speculative loop per drafter at K=5 (draft -> one target forward over
   [last, d_1..d_K] with the KV cache -> accept the matching prefix + the target's token ->
   crop the cache): measured tau, drafter time per round and target time per round. Greedy
   verification is lossless, so every drafter's loop must commit the same tokens (checked);
2. tau for K = 1..7 from the acceptance run length A(j) of a K=7 draft at every committed
   position j of that same greedy sequence (one teacher-forced target forward gives the hidden
   state at every position). With chain drafting, the first k draft tokens do not depend on K,
   so the K-loop commits min(A(j), K) + 1 tokens from position j: walking j -> j + that
   reproduces the real loop for every K exactly; the K=5 walk is checked against step 1;
3. confidence reliability: at every position reached (earlier drafts all accepted), the
   drafter's raw and calibrated confidence against acceptance -> ECE before / after.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch

from specd.worker.drafters.nets import DraftLM, crop_cache
from specd.worker.training.calibrate import ece, reliability_table

KS = tuple(range(1, 8))


def _forward(target: Any, ids: list[int], cache: Any, layers: tuple[int, ...] = ()
             ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run ``ids`` through the target with its cache: final-norm hidden states [T, H] and,
    for ``layers``, the residual stream after those decoder layers [T, len(layers), H]."""
    device = target.device
    out = target.model.model(input_ids=torch.tensor([ids], device=device),
                             past_key_values=cache, use_cache=True,
                             output_hidden_states=bool(layers))
    # HF hidden_states[i + 1] is the output of decoder layer i (the last one after the norm)
    feats = torch.stack([out.hidden_states[li + 1][0] for li in layers], 1) if layers else None
    return out.last_hidden_state[0], feats



def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def runtime_drafter(net: Any, max_context: int) -> Any:
    """The engine's runtime drafter for nets with state across rounds (the draft model's KV
    cache, a context layer's KV cache), so drafting is timed on the engine's own path;
    None for stateless heads (they are called directly)."""
    if isinstance(net, DraftLM):
        from specd.worker.drafters.draft_model import DraftModelDrafter

        return DraftModelDrafter(net, slots=1, max_context=max_context)
    if getattr(net, "context", None) is not None:
        from specd.worker.drafters.heads import ContextHeadDrafter

        return ContextHeadDrafter("semi-ar", net, slots=1, max_context=max_context)
    return None


@torch.inference_mode()
def verify_loop(target: Any, drafter: Any, prompt: list[int], K: int, max_new: int,
                eos_id: int | None) -> dict[str, Any]:
    """A real greedy speculative loop (batch 1). Returns tokens, rounds and timings."""
    from transformers import DynamicCache

    from specd.worker.drafters.base import DraftRow

    dev = target.device
    cache = DynamicCache()
    layer_ids = tuple(drafter.feature_layers)
    hidden, feats = _forward(target, prompt, cache, layer_ids)
    last = int(target.model.lm_head(hidden[-1]).argmax())
    h = hidden[-1]
    f = feats[-1] if feats is not None else None
    out = [last]
    stateful = runtime_drafter(drafter, len(prompt) + max_new + K + 1)
    committed_ids = list(prompt) + [last]
    new_context = hidden  # hidden states of committed positions the drafter has not seen
    rounds, draft_t, verify_t = 0, [], []
    while len(out) < max_new and (eos_id is None or out[-1] != eos_id):
        k = min(K, max_new - len(out))
        _sync(dev)
        t0 = time.perf_counter()
        if stateful is not None:
            row = DraftRow("eval", committed_ids, k,
                           context=new_context if stateful.needs_context else None)
            drafts = list(stateful.propose([row], h[None]).tokens[0])
        else:
            drafts = drafter.propose(h[None], torch.tensor([last], device=dev), k,
                                     layers=f[None] if f is not None else None).tokens[0].tolist()
        _sync(dev)
        t1 = time.perf_counter()
        base_len = cache.get_seq_length()
        rows, row_feats = _forward(target, [last] + drafts, cache, layer_ids)
        preds = target.model.lm_head(rows).argmax(-1).tolist()
        _sync(dev)
        t2 = time.perf_counter()
        a = 0
        while a < k and drafts[a] == preds[a]:
            a += 1
        committed = drafts[:a] + [preds[a]]
        if eos_id is not None and eos_id in committed:
            committed = committed[:committed.index(eos_id) + 1]
        out += committed
        committed_ids += committed
        new_context = rows[:a + 1]
        crop_cache(cache, base_len + 1 + a)
        h, last = rows[a], preds[a]
        f = row_feats[a] if row_feats is not None else None
        rounds += 1
        draft_t.append(t1 - t0)
        verify_t.append(t2 - t1)
    out = out[:max_new]
    return {"tokens": out, "rounds": rounds, "tau": (len(out) - 1) / max(1, rounds),
            "draft_s": draft_t, "verify_s": verify_t}


@torch.inference_mode()
def run_lengths(target: Any, drafter: Any, prompt: list[int], seq: list[int], Kmax: int = 7
                ) -> dict[str, np.ndarray]:
    """For each committed position j of ``seq`` (the greedy continuation): accepted run
    length A(j) of a Kmax draft, per-position acceptance, raw/calibrated confidences."""
    from transformers import DynamicCache

    dev = target.device
    full = list(prompt) + list(seq)
    hidden, feats = _forward(target, full, DynamicCache(), tuple(drafter.feature_layers))
    n = len(seq) - 1  # rounds can start at j = 0 .. n-1 (seq[j] is the last committed token)
    P = len(prompt)
    if isinstance(drafter, DraftLM):
        toks, zs, cs = [], [], []
        cache = DynamicCache()
        pending = list(prompt)
        for j in range(n):
            base = cache.get_seq_length()
            draft, cache = drafter.propose(torch.tensor([pending + [seq[j]]], device=dev),
                                           cache, Kmax)
            crop_cache(cache, base + len(pending) + 1)
            pending = []
            toks.append(draft.tokens[0])
            zs.append(draft.confidence_logit[0])
            cs.append(draft.confidence[0])
        tokens, z, conf = torch.stack(toks), torch.stack(zs), torch.stack(cs)
    else:
        h = hidden[P - 1:P - 1 + n]
        if getattr(drafter, "context", None) is not None:  # one causal pass = the engine's path
            ids = torch.tensor(full, device=dev)
            h = drafter.context(hidden[None, :P - 1 + n], drafter.embed(ids[None, 1:P + n]))[0]
            h = h[P - 1:P - 1 + n]
        last = torch.tensor(seq[:n], device=dev)
        draft = drafter.propose(h, last, Kmax,
                                layers=feats[P - 1:P - 1 + n] if feats is not None else None)
        tokens, z, conf = draft.tokens, draft.confidence_logit, draft.confidence
    truth = np.full((n, Kmax), -1, dtype=np.int64)
    for j in range(n):
        nxt = seq[j + 1:j + 1 + Kmax]
        truth[j, :len(nxt)] = nxt
    tokens = tokens.cpu().numpy()
    match = (tokens == truth)
    valid = truth >= 0
    reached = np.cumprod(np.concatenate([np.ones((n, 1), bool), match[:, :-1]], 1), 1).astype(bool)
    reached &= valid
    A = np.cumprod(match, 1).sum(1)
    return {"A": A, "match": match, "reached": reached,
            "conf_raw": 1 / (1 + np.exp(-z.float().cpu().numpy())),
            "conf_cal": conf.float().cpu().numpy()}


def tau_walk(A: np.ndarray, n_tokens: int, K: int) -> tuple[int, int]:
    """(tokens committed after the first, rounds) of a K-chain loop over run lengths A."""
    j, rounds, committed = 0, 0, 0
    last = n_tokens - 1
    while j < last:
        step = min(int(A[j]), K, last - j - 1) + 1
        j += step
        committed += step
        rounds += 1
    return committed, rounds


def evaluate_drafters(target: Any, drafters: dict[str, Any], prompts: list[list[int]],
                      max_new: int, K_real: int = 5, progress: bool = True) -> dict[str, Any]:
    """The evaluation JSON (see module docstring) for every named drafter."""
    from tqdm import tqdm

    eos = target.tokenizer.eos_token_id
    names = list(drafters)
    acc: dict[str, dict[str, Any]] = {
        m: {"tau_c": {K: 0 for K in KS}, "tau_r": {K: 0 for K in KS}, "real_tok": 0,
            "real_rounds": 0, "draft_s": [], "verify_s": [], "match": [], "reached": [],
            "raw": [], "cal": [], "walk5_tok": 0, "walk5_rounds": 0}
        for m in names}
    lossless = True
    for prompt in tqdm(prompts, desc="eval", unit="prompt", disable=not progress):
        seqs = {}
        for m in names:
            r = verify_loop(target, drafters[m], prompt, K_real, max_new, eos)
            seqs[m] = r["tokens"]
            a = acc[m]
            a["real_tok"] += len(r["tokens"]) - 1
            a["real_rounds"] += r["rounds"]
            a["draft_s"] += r["draft_s"]
            a["verify_s"] += r["verify_s"]
        ref = seqs[names[0]]
        lossless &= all(s == ref for s in seqs.values())
        if len(ref) < 3:
            continue
        for m in names:
            rl = run_lengths(target, drafters[m], prompt, ref)
            a = acc[m]
            for K in KS:
                c, r_ = tau_walk(rl["A"], len(ref), K)
                a["tau_c"][K] += c
                a["tau_r"][K] += r_
            a["match"].append(rl["match"])
            a["reached"].append(rl["reached"])
            a["raw"].append(rl["conf_raw"])
            a["cal"].append(rl["conf_cal"])
    result: dict[str, Any] = {}
    for m in names:
        a = acc[m]
        match, reached = np.concatenate(a["match"]), np.concatenate(a["reached"])
        raw, cal = np.concatenate(a["raw"]), np.concatenate(a["cal"])
        per_pos = [float(match[reached[:, i], i].mean()) if reached[:, i].any() else None
                   for i in range(match.shape[1])]
        ratio = [d / v for d, v in zip(a["draft_s"], a["verify_s"], strict=True) if v > 0]
        result[m] = {
            "tau": {str(K): round(a["tau_c"][K] / max(1, a["tau_r"][K]), 4) for K in KS},
            "acceptance_per_position": [round(p, 4) if p is not None else None for p in per_pos],
            "ece_before": round(ece(raw[reached], match[reached]), 4),
            "ece_after": round(ece(cal[reached], match[reached]), 4),
            "draft_cost_ratio": round(statistics.median(ratio), 4) if ratio else None,
            "tau_measured_k5": round(a["real_tok"] / max(1, a["real_rounds"]), 4),
            "draft_ms_per_round": round(1000 * statistics.median(a["draft_s"]), 3),
            "target_forward_ms": round(1000 * statistics.median(a["verify_s"]), 3),
            "reliability_after": reliability_table(cal[reached], match[reached]),
            "eval_set": {"prompts": len(prompts), "max_new_tokens": max_new,
                         "positions": int(len(match)), "lossless_greedy": bool(lossless)},
        }
    return result


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for m, r in result.items():
        axes[0].plot([int(k) for k in r["tau"]], list(r["tau"].values()), marker="o", label=m)
        pp = [p if p is not None else np.nan for p in r["acceptance_per_position"]]
        axes[1].plot(range(1, len(pp) + 1), pp, marker="o", label=m)
        rel = [row for row in r["reliability_after"] if row["count"]]
        axes[2].plot([row["confidence"] for row in rel], [row["accuracy"] for row in rel],
                     marker="o", label=f"{m} (ECE {r['ece_after']:.3f})")
    axes[0].set(title="tokens per target forward (tau)", xlabel="K", ylabel="tau")
    axes[1].set(title="acceptance given earlier accepted", xlabel="draft position",
                ylabel="acceptance", ylim=(0, 1))
    axes[2].plot([0, 1], [0, 1], color="grey", linestyle=":")
    axes[2].set(title="reliability (calibrated)", xlabel="confidence", ylabel="accepted",
                xlim=(0, 1), ylim=(0, 1))
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary_table(result: dict[str, Any]) -> str:
    """A Markdown table of the headline figures (README, logs)."""
    lines = ["| method | " + " | ".join(f"tau K={k}" for k in KS)
             + " | acceptance per position | ECE before | ECE after | draft cost |",
             "|---|" + "---|" * (len(KS) + 4)]
    for m, r in result.items():
        acc = ", ".join(f"{p:.2f}" if p is not None else "-" for p in r["acceptance_per_position"])
        cost = r["draft_cost_ratio"]
        lines.append(f"| {m} | " + " | ".join(f"{r['tau'][str(k)]:.2f}" for k in KS)
                     + f" | {acc} | {r['ece_before']:.3f} | {r['ece_after']:.3f} | "
                     + (f"{cost:.3f}" if cost is not None else "-") + " |")
    return "\n".join(lines)
