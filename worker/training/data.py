"""Self-distillation data: the target's own continuations, hidden states and top-k distributions.

One batched decode loop per chunk of prompts records, at every continuation position p (from
the last prompt token on), the target's final hidden state h_p (fp16) and its top-k next-token
log-probabilities (the teacher). Greedy continuations for every prompt; sampled ones
(temperature ``sample_temperature``) for a fraction of the training prompts. Chunks are saved
as they finish (resumable) under ``~/.cache/specd/data/<hash>/``; the hash covers the target
fingerprint, the prompts and every setting, so the same seed gives the same data set.

Layout of a split (numpy files):
  seq_ids [N] int32, seq_off [n+1]      full token sequences (prompt + continuation)
  prompt_len [n] int32                  prompt length of each sequence
  hidden [R, H] fp16, row_off [n+1]     rows for positions prompt_len-1 .. len-1
  topk_ids [R, k] int32, topk_lp [R, k] fp16   teacher log-probs predicting x[p+1]
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specd import SpecdError
from specd.worker.training.broad_prompts import build_broad_prompts
from specd.worker.training.prompts import Prompt, build_prompts, split_prompts
from specd.worker.training.settings import DataSettings

SPLITS = ("train", "calib", "test")


def cache_root() -> Path:
    return Path(os.environ.get("SPECD_CACHE", Path.home() / ".cache" / "specd")) / "data"


def chat_ids(tokenizer: Any, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                        add_generation_prompt=True, tokenize=True)
    if not isinstance(ids, list):
        ids = ids["input_ids"]
    return list(ids)


def _settings_key(settings: DataSettings) -> dict[str, Any]:
    """Settings as hashed: fields added later are left out at their neutral value, so the
    hashes of data sets made before they existed stay the same."""
    key = asdict(settings)
    for name in ("extra_sampled", "extra_prompts", "self_prompts"):
        if key[name] == 0:
            key.pop(name)
    return key


def data_hash(settings: DataSettings, fingerprint: str, prompts: dict[str, list[Prompt]]) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps(_settings_key(settings), sort_keys=True).encode())
    digest.update(fingerprint.encode())
    for split in (*SPLITS, "extra", "self"):
        for p in prompts.get(split, []):
            digest.update(f"{split}\x00{p.text}\x00".encode())
    return digest.hexdigest()[:16]


@torch.inference_mode()
def decode_batch(model: Any, prompts: list[list[int]], max_new_tokens: int, eos_id: int,
                 pad_id: int, topk: int, temperatures: list[float] | None = None,
                 generator: torch.Generator | None = None) -> list[dict[str, np.ndarray]]:
    """Batched left-padded decode recording hidden states and top-k log-probs per position.

    ``temperatures[i]`` is 0 for a greedy row, else that row samples at that temperature.
    """
    from transformers import DynamicCache

    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    batch = len(prompts)
    ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    temps = torch.tensor(temperatures or [0.0] * batch, dtype=torch.float32, device=device)
    sampled_rows = temps > 0
    hiddens, tk_ids, tk_lps, tokens = [], [], [], []
    step_ids, step_pos = ids, positions
    for _ in range(max_new_tokens + 1):
        out = model.model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                          past_key_values=cache, use_cache=True)
        h = out.last_hidden_state[:, -1]
        logp = torch.log_softmax(model.lm_head(h).float(), dim=-1)
        top = logp.topk(topk, dim=-1)
        hiddens.append(h.to(torch.float16).cpu())
        tk_ids.append(top.indices.to(torch.int32).cpu())
        tk_lps.append(top.values.to(torch.float16).cpu())
        if len(tokens) == max_new_tokens or bool(done.all()):
            break
        nxt = logp.argmax(-1)
        if bool(sampled_rows.any()):
            probs = torch.softmax(logp / temps.clamp(min=1e-3)[:, None], dim=-1)
            drawn = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(device)
            nxt = torch.where(sampled_rows, drawn, nxt)
        was_done = done
        nxt = torch.where(was_done, torch.full_like(nxt, pad_id), nxt)
        tokens.append(nxt.cpu())
        done = was_done | (nxt == eos_id)
        step_ids = nxt[:, None]
        step_pos = step_pos[:, -1:] + 1
        # pads after EOS are never attended (pad id may equal the EOS id)
        mask = torch.cat([mask, (~was_done).long()[:, None]], dim=1)
    gen = torch.stack(tokens, 1) if tokens else torch.zeros(batch, 0, dtype=torch.long)
    hid, tki, tkl = torch.stack(hiddens, 1), torch.stack(tk_ids, 1), torch.stack(tk_lps, 1)
    results = []
    for i, p in enumerate(prompts):
        cont = gen[i].tolist()
        if eos_id in cont:
            cont = cont[:cont.index(eos_id) + 1]
        n_rows = len(cont) + 1  # last prompt position + every continuation position
        results.append({"seq": np.asarray(p + cont, dtype=np.int32),
                        "prompt_len": len(p),
                        "hidden": hid[i, :n_rows].numpy(),
                        "topk_ids": tki[i, :n_rows].numpy(),
                        "topk_lp": tkl[i, :n_rows].numpy()})
    return results


@torch.inference_mode()
def decode_batch_runner(runner: Any, prompts: list[list[int]], max_new_tokens: int, eos_id: int,
                        topk: int, temperatures: list[float] | None = None,
                        generator: torch.Generator | None = None) -> list[dict[str, np.ndarray]]:
    """Same records as :func:`decode_batch`, through the engine's ragged batched forward.

    No padding (each prompt is its own row, finished rows leave the batch), which makes it
    several times faster than the HF loop on CPU; used for Llama-architecture targets.
    """
    from specd.worker.engine.llama import Row

    batch = len(prompts)
    cache = runner.new_cache(batch, max(len(p) for p in prompts) + max_new_tokens + 1)
    slots = [cache.allocate() for _ in prompts]
    temps = torch.tensor(temperatures or [0.0] * batch, dtype=torch.float32)
    rec: list[dict[str, list[Any]]] = [{"h": [], "ids": [], "lp": []} for _ in prompts]
    conts: list[list[int]] = [[] for _ in prompts]
    active = list(range(batch))
    rows = [Row(slots[i], list(p), "last") for i, p in enumerate(prompts)]
    while active:
        out = runner.forward(cache, rows)
        logp = torch.log_softmax(out.logits.float(), dim=-1)
        top = logp.topk(topk, dim=-1)
        hidden = out.hidden.to(torch.float16)
        for j, i in enumerate(active):
            rec[i]["h"].append(hidden[j])
            rec[i]["ids"].append(top.indices[j].to(torch.int32))
            rec[i]["lp"].append(top.values[j].to(torch.float16))
        nxt = logp.argmax(-1)
        t = temps[active]
        if bool((t > 0).any()):
            probs = torch.softmax(logp / t.clamp(min=1e-3)[:, None], dim=-1)
            drawn = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            nxt = torch.where(t > 0, drawn, nxt)
        still, rows = [], []
        for j, i in enumerate(active):
            cont = conts[i]
            if (cont and cont[-1] == eos_id) or len(cont) == max_new_tokens:
                continue  # this forward recorded the row after its last token
            cont.append(int(nxt[j]))
            still.append(i)
            rows.append(Row(slots[i], [cont[-1]], "all"))
        active = still
    return [{"seq": np.asarray(p + conts[i], dtype=np.int32), "prompt_len": len(p),
             "hidden": torch.stack(rec[i]["h"]).numpy(),
             "topk_ids": torch.stack(rec[i]["ids"]).numpy(),
             "topk_lp": torch.stack(rec[i]["lp"]).numpy()} for i, p in enumerate(prompts)]


def _save_split(directory: Path, split: str, items: list[dict[str, Any]]) -> None:
    seq_off = np.cumsum([0] + [len(x["seq"]) for x in items]).astype(np.int64)
    row_off = np.cumsum([0] + [len(x["hidden"]) for x in items]).astype(np.int64)
    arrays = {
        "seq_ids": np.concatenate([x["seq"] for x in items]), "seq_off": seq_off,
        "prompt_len": np.asarray([x["prompt_len"] for x in items], dtype=np.int32),
        "row_off": row_off,
        "hidden": np.concatenate([x["hidden"] for x in items]),
        "topk_ids": np.concatenate([x["topk_ids"] for x in items]),
        "topk_lp": np.concatenate([x["topk_lp"] for x in items]),
        "prompt_index": np.asarray([x["prompt_index"] for x in items], dtype=np.int32),
        "sampled": np.asarray([x["sampled"] for x in items], dtype=np.bool_),
    }
    (directory / split).mkdir(parents=True, exist_ok=True)
    for name, value in arrays.items():
        np.save(directory / split / f"{name}.npy", value)


def _select_prompts(tokenizer: Any, settings: DataSettings,
                    self_written: list[Prompt] | None = None) -> dict[str, list[Prompt]]:
    """Prompts that fit ``max_prompt_tokens``, split; train order is a stable prefix.

    ``extra`` holds the first ``extra_prompts`` broad prompts (``broad_prompts.py``): they
    train alongside ``train`` and are a stable prefix of their own list. ``self`` holds the
    target's self-written prompts (``self_prompts.py``; made by the caller), train as well.
    """
    def fits(p: Prompt) -> bool:
        return len(chat_ids(tokenizer, p.text)) <= settings.max_prompt_tokens

    splits = split_prompts([p for p in build_prompts(settings.seed) if fits(p)],
                           settings.n_train, settings.n_calib, settings.n_test)
    splits["extra"] = []
    if settings.extra_prompts:
        broad = [p for p in build_broad_prompts(settings.seed) if fits(p)]
        if settings.extra_prompts > len(broad):
            raise SpecdError(f"--extra-prompts {settings.extra_prompts}: the broad prompt set "
                             f"has {len(broad)}")
        splits["extra"] = broad[:settings.extra_prompts]
    splits["self"] = [p for p in self_written or [] if fits(p)]
    return splits


def _self_written(decode: _BatchDecoder, tok: Any, settings: DataSettings, fingerprint: str,
                  progress: bool) -> list[Prompt]:
    """The target's own prompts (cached), never equal to a template, broad or benchmark one."""
    if not settings.self_prompts:
        return []
    from specd.worker.bench.prompts import benchmark_texts
    from specd.worker.training.prompts import build_prompts
    from specd.worker.training.self_prompts import self_prompts

    exclude = benchmark_texts() | {p.text for p in (*build_prompts(settings.seed),
                                 *build_broad_prompts(settings.seed))}
    return self_prompts(lambda: decode.runner, tok, settings.self_prompts, settings.seed,
                        fingerprint, settings.dtype, cache_root(), exclude, progress)


def _is_sampled(settings: DataSettings, prompt: Prompt) -> bool:
    """Whether a train prompt gets a sampled continuation instead of a greedy one."""
    if settings.sampled_fraction <= 0:
        return False
    digest = hashlib.sha256(f"{settings.seed}:{prompt.id}".encode()).digest()
    return digest[0] / 256.0 < settings.sampled_fraction


def _jobs(settings: DataSettings, split: str, prompts: list[Prompt]) -> list[tuple[Prompt, bool]]:
    """(prompt, sampled?) continuations to generate, in prompt order (train: a stable prefix)."""
    if split != "train":
        return [(p, False) for p in prompts]
    jobs = []
    for p in prompts:
        jobs.append((p, _is_sampled(settings, p)))
        jobs.extend((p, True) for _ in range(settings.extra_sampled))
    return jobs


def _runner_or_none(model: Any) -> Any:
    """The engine's batched forward over ``model`` when it is a Llama-architecture model."""
    from specd.worker.engine.llama import LlamaRunner

    try:
        return LlamaRunner(model)
    except (ValueError, AttributeError):
        return None


class _BatchDecoder:
    """Decodes batches in the generation dtype, through the engine's forward when it can.

    The model copy and the runner are built on first use: an assembly run over cached
    batches needs neither.
    """

    def __init__(self, target: Any, settings: DataSettings) -> None:
        self.target, self.settings = target, settings
        tok = target.tokenizer
        self.eos_id = tok.eos_token_id
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.eos_id

    @cached_property
    def model(self) -> Any:
        import copy

        from specd.worker.model import resolve_dtype

        # a separate copy in the generation dtype: casting the target there and back would
        # round its weights (and change its fingerprint)
        gen_dtype = resolve_dtype(self.settings.dtype, self.target.device)
        model = self.target.model
        return model if next(model.parameters()).dtype == gen_dtype else (
            copy.deepcopy(model).to(gen_dtype))

    @cached_property
    def runner(self) -> Any:
        return _runner_or_none(self.model)

    def __call__(self, prompts: list[list[int]], temperatures: list[float],
                 generator: torch.Generator) -> list[dict[str, np.ndarray]]:
        s = self.settings
        if self.runner is not None:
            return decode_batch_runner(self.runner, prompts, s.max_new_tokens, self.eos_id,
                                       s.topk, temperatures, generator)
        return decode_batch(self.model, prompts, s.max_new_tokens, self.eos_id, self.pad_id,
                            s.topk, temperatures, generator)


def _claim(path: Path) -> bool:
    """Atomically claim a batch for this worker (``shard=(0, 0)``: work-sharing mode)."""
    try:
        os.close(os.open(path.with_suffix(".claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _decode_jobs(decode: _BatchDecoder, tok: Any, settings: DataSettings, chunks: Path,
                 prefix: str, jobs: list[tuple[Prompt, bool]], seed_offset: int,
                 shard: tuple[int, int] | None, progress: bool) -> list[dict[str, Any]]:
    """Decode ``jobs`` batch by batch into ``chunks/<prefix>_<b>_<n>.pt`` (cached, claimable);
    return the items (in shard mode only those this worker decoded: it fills the cache)."""
    from tqdm import tqdm

    bs = settings.batch_size
    batches = [jobs[i:i + bs] for i in range(0, len(jobs), bs)]
    items: list[dict[str, Any]] = []
    bar = tqdm(batches, desc=f"data {prefix}", unit="batch", disable=not progress)
    for b, batch in enumerate(bar):
        path = chunks / f"{prefix}_{b:05d}_{len(batch)}.pt"
        if shard is not None and shard[1] > 0 and b % shard[1] != shard[0]:
            continue
        if path.is_file():
            if shard is None:
                items += torch.load(path, weights_only=False)
            continue
        if shard is not None and shard[1] == 0 and not _claim(path):
            continue  # another worker has it
        temps = [settings.sample_temperature if s_ else 0.0 for _, s_ in batch]
        gen = torch.Generator().manual_seed(settings.seed * 100003 + seed_offset + b)
        res = decode([chat_ids(tok, p.text) for p, _ in batch], temps, gen)
        for r, (p, s_) in zip(res, batch, strict=True):
            r["prompt_index"], r["sampled"] = p.id, s_
        torch.save(res, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)
        items += res
        bar.set_postfix(tokens=sum(len(x["hidden"]) for x in items))
    return items


def generate_data(target: Any, settings: DataSettings, fingerprint: str,
                  progress: bool = True, shard: tuple[int, int] | None = None) -> Path:
    """Generate (or reuse) the data set; return its folder. Resumable batch by batch.

    Batches are cached under a key that leaves out the split sizes, so a run with a larger
    ``n_train`` reuses every batch of a smaller one (train prompts are a stable prefix).
    ``shard=(i, n)`` only generates batches b with b % n == i, ``shard=(0, 0)`` claims the
    next free batch (parallel workers filling the chunk cache); a run without ``shard``
    fills the gaps and assembles the data set.
    """
    tok = target.tokenizer
    decode = _BatchDecoder(target, settings)
    all_prompts = _select_prompts(tok, settings,
                                  _self_written(decode, tok, settings, fingerprint, progress))
    digest = data_hash(settings, fingerprint, all_prompts)
    directory = cache_root() / digest
    if (directory / "meta.json").is_file():
        return directory
    base = _settings_key(settings)
    for key in ("n_train", "n_calib", "n_test", "extra_prompts", "self_prompts"):
        base.pop(key, None)
    chunk_key = hashlib.sha256(json.dumps([base, fingerprint, settings.n_test, settings.n_calib],
                                          sort_keys=True).encode()).hexdigest()[:16]
    chunks = cache_root() / f"chunks-{chunk_key}"
    chunks.mkdir(parents=True, exist_ok=True)
    for split in ("test", "calib", "train"):  # train last: its batches extend
        # (chunk file prefix, jobs, seed offset): broad and self-written prompts get batches
        # of their own
        groups = [(split, _jobs(settings, split, all_prompts[split]), 0)]
        for family, offset in (("extra", 50_000), ("self", 70_000)):
            if split == "train" and all_prompts[family]:
                groups.append((family, _jobs(settings, "train", all_prompts[family]), offset))
        items: list[dict[str, Any]] = []
        for prefix, jobs, seed_offset in groups:
            items += _decode_jobs(decode, tok, settings, chunks, prefix, jobs, seed_offset,
                                  shard, progress)
        if shard is None:
            directory.mkdir(parents=True, exist_ok=True)
            _save_split(directory, split, items)
    if shard is not None:
        return chunks
    meta = {"hash": digest, "settings": asdict(settings), "target_fingerprint": fingerprint,
            "splits": {s: len(all_prompts[s]) for s in SPLITS},
            "extra_prompts": len(all_prompts["extra"]),  # broad prompts inside train
            "self_prompts": len(all_prompts["self"]),  # self-written prompts inside train
            "rows": {s: int(np.load(directory / s / "row_off.npy")[-1]) for s in SPLITS}}
    (directory / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return directory


@dataclass
class Split:
    """One split loaded (hidden memory-mapped)."""

    seq_ids: np.ndarray
    seq_off: np.ndarray
    prompt_len: np.ndarray
    row_off: np.ndarray
    hidden: np.ndarray
    topk_ids: np.ndarray
    topk_lp: np.ndarray
    prompt_index: np.ndarray
    sampled: np.ndarray
    # hidden states of prompt positions 0..P-2 (``add_prompt_hidden``), for context layers
    prompt_hidden: np.ndarray | None = None  # [sum(P-1), H] fp16
    prompt_hidden_off: np.ndarray | None = None  # [n+1]
    # residual stream after chosen decoder layers at each row (``add_layer_hidden``)
    layer_hidden: np.ndarray | None = None  # [R, n_layers, H] fp16

    def __len__(self) -> int:
        return len(self.prompt_len)

    def sequence(self, i: int) -> np.ndarray:
        return self.seq_ids[self.seq_off[i]:self.seq_off[i + 1]]

    def sequence_hidden(self, i: int) -> np.ndarray:
        """Hidden state at every position 0..L-1 of sequence i (needs ``prompt_hidden``)."""
        if self.prompt_hidden is None or self.prompt_hidden_off is None:
            raise ValueError("this split has no prompt hidden states: run add_prompt_hidden")
        head = self.prompt_hidden[self.prompt_hidden_off[i]:self.prompt_hidden_off[i + 1]]
        return np.concatenate([head, self.hidden[self.row_off[i]:self.row_off[i + 1]]])

    def row_tokens(self) -> np.ndarray:
        """Token x[p] for every row (aligned with ``hidden``)."""
        out = np.empty(self.row_off[-1], dtype=np.int64)
        for i in range(len(self)):
            seq = self.sequence(i)
            out[self.row_off[i]:self.row_off[i + 1]] = seq[self.prompt_len[i] - 1:]
        return out


OPTIONAL_FIELDS = ("prompt_hidden", "prompt_hidden_off", "layer_hidden")


def load_split(directory: str | os.PathLike[str], split: str) -> Split:
    d = Path(directory) / split
    fields = {name: np.load(d / f"{name}.npy", mmap_mode="r" if "hidden" in name and
                            not name.endswith("_off") else None)
              for name in Split.__dataclass_fields__
              if name not in OPTIONAL_FIELDS or (d / f"{name}.npy").is_file()}
    return Split(**fields)


def _generation_runner(target: Any, directory: Path, what: str) -> Any:
    """The engine's forward over the target in the data set's generation dtype (features added
    to a data set must come from the same numerics as the rest of it)."""
    settings = DataSettings(**load_meta(directory)["settings"])
    runner = _BatchDecoder(target, settings).runner
    if runner is None:
        raise ValueError(f"{what} need a Llama-architecture target")
    return runner


@torch.inference_mode()
def add_prompt_hidden(target: Any, directory: str | os.PathLike[str], progress: bool = True,
                      batch_size: int = 16) -> None:
    """Record the target's hidden states at prompt positions 0..P-2 of every sequence.

    The decode loop records hidden states from the last prompt token on; a drafter with a
    context layer also reads the prompt's, as the engine gives it after prefill. One batched
    prefill per distinct prompt, in the data set's generation dtype, through the engine's
    forward; saved beside the split as ``prompt_hidden.npy`` / ``prompt_hidden_off.npy``.
    """
    from tqdm import tqdm

    from specd.worker.engine.llama import Row

    directory = Path(directory)
    runner = _generation_runner(target, directory, "prompt hidden states")
    for name in SPLITS:
        if (directory / name / "prompt_hidden.npy").is_file():
            continue
        split = load_split(directory, name)
        prompts = {int(split.prompt_index[i]): [int(t) for t in
                                                split.sequence(i)[:int(split.prompt_len[i])]]
                   for i in range(len(split))}
        keys = sorted(prompts)
        longest = max(len(p) for p in prompts.values())
        cache = runner.new_cache(batch_size, longest)
        got: dict[int, np.ndarray] = {}
        for start in tqdm(range(0, len(keys), batch_size), desc=f"prompt hidden {name}",
                          disable=not progress):
            chunk = keys[start:start + batch_size]
            for slot in range(batch_size):
                cache.lengths[slot] = 0
            rows = [Row(j, prompts[key], "none") for j, key in enumerate(chunk)]
            out = runner.forward(cache, rows, logits=False, all_hidden=True)
            flat = out.all_hidden.to(torch.float16).cpu().numpy()
            for j, key in enumerate(chunk):
                n = len(prompts[key]) - 1
                got[key] = flat[out.flat_starts[j]: out.flat_starts[j] + n]
        parts = [got[int(split.prompt_index[i])] for i in range(len(split))]
        off = np.cumsum([0] + [len(x) for x in parts]).astype(np.int64)
        np.save(directory / name / "prompt_hidden_off.npy", off)
        tmp = directory / name / "prompt_hidden.tmp.npy"  # complete or absent: resumable
        np.save(tmp, np.concatenate(parts))
        tmp.rename(directory / name / "prompt_hidden.npy")


@torch.inference_mode()
def add_layer_hidden(target: Any, directory: str | os.PathLike[str], layers: tuple[int, ...],
                     progress: bool = True, batch_size: int = 8) -> None:
    """Record the target's residual stream after decoder ``layers`` at every row's position.

    For drafters that read low and middle layers as well as h_p (EAGLE-3's fused features).
    One teacher-forced prefill per sequence, in the data set's generation dtype, through the
    engine's forward; saved as ``layer_hidden.npy`` [R, len(layers), H] fp16 aligned with
    ``hidden``, and ``layer_hidden.json`` naming the layers.
    """
    from tqdm import tqdm

    from specd.worker.engine.llama import Row

    directory = Path(directory)
    runner = _generation_runner(target, directory, "layer hidden states")
    for name in SPLITS:
        marker = directory / name / "layer_hidden.json"
        if marker.is_file() and json.loads(marker.read_text())["layers"] == list(layers):
            continue
        split = load_split(directory, name)
        longest = int(np.diff(split.seq_off).max())
        cache = runner.new_cache(batch_size, longest)
        out_arr = np.lib.format.open_memmap(directory / name / "layer_hidden.tmp.npy", mode="w+",
                                            dtype=np.float16,
                                            shape=(int(split.row_off[-1]), len(layers),
                                                   runner.hidden_size))
        for start in tqdm(range(0, len(split), batch_size), desc=f"layer hidden {name}",
                          disable=not progress):
            chunk = range(start, min(start + batch_size, len(split)))
            for slot in range(batch_size):
                cache.lengths[slot] = 0
            rows = [Row(j, [int(t) for t in split.sequence(i)]) for j, i in enumerate(chunk)]
            got = runner.forward(cache, rows, logits=False, layers=layers)
            feats = got.layer_hidden.to(torch.float16).cpu().numpy()
            for j, i in enumerate(chunk):
                first = int(split.prompt_len[i]) - 1  # rows start at the last prompt token
                n = int(split.row_off[i + 1] - split.row_off[i])
                at = got.starts[j] + first
                out_arr[split.row_off[i]:split.row_off[i + 1]] = feats[at:at + n]
        out_arr.flush()
        del out_arr
        (directory / name / "layer_hidden.tmp.npy").rename(directory / name / "layer_hidden.npy")
        marker.write_text(json.dumps({"layers": list(layers)}) + "\n")


def load_meta(directory: str | os.PathLike[str]) -> dict[str, Any]:
    return json.loads((Path(directory) / "meta.json").read_text())
