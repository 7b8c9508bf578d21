"""Drafter training, artifacts, calibration and the committed smollm2-135m drafters.

Real components throughout: the embedded target generates a tiny self-distillation data set
(a few prompts, a few dozen tokens), real nets train on it for a few steps.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.model


# ---------------------------------------------------------------- nets (no training needed)

def _tiny_vocab(target, n=512):
    eos = target.tokenizer.eos_token_id
    return torch.tensor(sorted(set(range(n)) | {eos}))


def test_sampled_q_is_the_distribution_the_token_came_from(target):
    from specd.worker.drafters.nets import SemiARDrafter

    torch.manual_seed(0)
    vocab = _tiny_vocab(target)
    net = SemiARDrafter(576, 4, vocab, target.model.config.vocab_size).bind(target).eval()
    for p in net.parameters():  # make the heads non-trivial
        torch.nn.init.normal_(p, std=0.02)
    hidden = torch.randn(3, 576)
    last = torch.tensor([10, 20, 30])
    greedy = net.propose(hidden, last, 4)
    assert greedy.tokens.shape == (3, 4) and greedy.q.shape == (3, 4, 49152)
    assert torch.all(greedy.q.sum(-1) == 1) and torch.all(greedy.q.max(-1).values == 1)
    assert torch.equal(greedy.q.argmax(-1), greedy.tokens)
    gen = torch.Generator().manual_seed(1)
    sampled = net.propose(hidden, last, 4, temperature=0.7, generator=gen)
    assert torch.allclose(sampled.q.sum(-1), torch.ones(3, 4), atol=1e-5)
    outside = torch.ones(49152, dtype=torch.bool)
    outside[vocab] = False
    assert sampled.q[..., outside].sum() == 0  # no mass outside the drafter's vocabulary
    picked = sampled.q.gather(-1, sampled.tokens[..., None]).squeeze(-1)
    assert torch.all(picked > 0)
    # the sequential head conditions on earlier draft tokens: same h, other last token
    other = net.propose(hidden, torch.tensor([11, 21, 31]), 4)
    assert not torch.allclose(other.confidence_logit, greedy.confidence_logit)
    assert torch.all((greedy.confidence >= 0) & (greedy.confidence <= 1))


def test_draft_lm_logits_are_full_vocab_and_cache_rolls_back(target):
    from specd.worker.drafters.nets import DraftLM, crop_cache

    vocab = _tiny_vocab(target)
    net = DraftLM(576, 5, vocab, 49152, num_layers=1).bind(target).eval()
    ids = torch.tensor([[1, 2, 3, 4]])
    out = net(ids)
    assert out.logits.shape == (1, 4, 49152)
    assert torch.isinf(out.logits[0, 0, 600]) and torch.isfinite(out.logits[0, 0, 5])
    draft, cache = net.propose(ids, None, 3)
    assert cache.get_seq_length() == 4 + 2
    crop_cache(cache, 4)
    again, _ = net.propose(torch.tensor([[draft.tokens[0, 0].item()]]), cache, 1)
    assert again.tokens[0, 0] == draft.tokens[0, 1]  # same continuation after the rollback


def test_warm_start_carries_weights_across_output_vocabularies(target):
    """New data can change the frequent-token vocabulary; no learned weight is indexed by it."""
    from specd.worker.training.train_heads import make_net, warm_start

    torch.manual_seed(0)
    source = make_net("semi-ar", target.model.config, 4, _tiny_vocab(target, 512)).bind(target)
    for p in source.parameters():
        torch.nn.init.normal_(p, std=0.02)
    other = torch.tensor(sorted(set(range(256, 768)) | {target.tokenizer.eos_token_id}))
    warm = make_net("semi-ar", target.model.config, 4, other).bind(target)
    warm_start(warm, source)
    assert torch.equal(warm.vocab_ids, other)
    assert torch.equal(warm.sub_head, target.model.lm_head.weight.detach()[other])
    theirs = source.state_dict()
    for name, value in warm.state_dict().items():
        if name != "vocab_ids" and not name.startswith("calib_"):
            assert torch.equal(value, theirs[name]), name


def test_a_warm_start_keeps_its_sources_vocabulary_and_checkpoints_are_keyed_by_it(
        tiny_data, target, tmp_path):
    from specd.worker.training.jobs import checkpoint_path, output_vocab
    from specd.worker.training.train_heads import frequent_vocab, make_net

    train = tiny_data[0]["train"]
    eos = target.tokenizer.eos_token_id
    source = make_net("semi-ar", target.model.config, 4, _tiny_vocab(target, 300))
    own = output_vocab(train, "semi-ar", 64, None, eos)
    assert torch.equal(own, frequent_vocab(train, 64, [eos]))
    assert torch.equal(output_vocab(train, "semi-ar", None, source, eos), source.vocab_ids)
    assert torch.equal(output_vocab(train, "semi-ar", 64, source, eos), own)  # asked for
    paths = {checkpoint_path(tmp_path, "h", "semi-ar", "-warmx", v, 7, 0)
             for v in (own, source.vocab_ids, own.clone())}
    assert len(paths) == 2  # same vocabulary, same checkpoint; another one, another


# ---------------------------------------------------------------- tiny data + training

@pytest.fixture(scope="module")
def tiny_data(target, tmp_path_factory):
    import os

    from specd.worker.model import model_fingerprint
    from specd.worker.training.data import DataSettings, generate_data, load_split

    old = os.environ.get("SPECD_CACHE")
    os.environ["SPECD_CACHE"] = str(tmp_path_factory.mktemp("specd-cache"))
    try:
        settings = DataSettings(n_train=12, n_calib=4, n_test=4, max_new_tokens=32,
                                batch_size=12, sampled_fraction=0.25)
        directory = generate_data(target, settings, model_fingerprint(target), progress=False)
        again = generate_data(target, settings, model_fingerprint(target), progress=False)
    finally:
        if old is None:
            os.environ.pop("SPECD_CACHE")
        else:
            os.environ["SPECD_CACHE"] = old
    assert again == directory  # cached and deterministic: same settings, same hash
    return {s: load_split(directory, s) for s in ("train", "calib", "test")}, directory


@pytest.mark.slow
def test_engine_forward_generation_equals_the_hf_loop(target):
    """decode_batch_runner (the engine's ragged forward) records what decode_batch (HF, padded)
    records: same greedy tokens, same top-k, hidden states equal to fp32 rounding."""
    from specd.worker.training.data import (
        _runner_or_none,
        chat_ids,
        decode_batch,
        decode_batch_runner,
    )

    tok = target.tokenizer
    prompts = [chat_ids(tok, t) for t in ("List two colours.", "用一句话介绍长城。")]
    hf = decode_batch(target.model, prompts, 12, tok.eos_token_id, tok.pad_token_id, 8)
    ours = decode_batch_runner(_runner_or_none(target.model), prompts, 12, tok.eos_token_id, 8)
    for a, b in zip(hf, ours, strict=True):
        assert np.array_equal(a["seq"], b["seq"]) and a["prompt_len"] == b["prompt_len"]
        assert a["hidden"].shape == b["hidden"].shape == (len(a["seq"]) - a["prompt_len"] + 1,
                                                          target.model.config.hidden_size)
        assert np.abs(a["hidden"].astype(np.float32) - b["hidden"].astype(np.float32)).max() < 2e-2
        assert np.array_equal(a["topk_ids"][:, 0], b["topk_ids"][:, 0])


def test_extra_sampled_jobs_and_stable_hashes():
    from dataclasses import replace

    from specd.worker.training.data import _jobs, _settings_key
    from specd.worker.training.prompts import build_prompts
    from specd.worker.training.settings import DataSettings

    base = DataSettings(sampled_fraction=0.0)
    assert "extra_sampled" not in _settings_key(base)  # older data sets keep their hash
    more = replace(base, extra_sampled=2)
    assert _settings_key(more)["extra_sampled"] == 2
    prompts = build_prompts(0)[:3]
    jobs = _jobs(more, "train", prompts)
    assert [(p.id, s) for p, s in jobs] == [(p.id, s) for p in prompts
                                           for s in (False, True, True)]
    assert _jobs(more, "test", prompts) == [(p, False) for p in prompts]


def test_broad_prompts_are_new_and_never_benchmark_prompts():
    from specd.worker.bench.prompts import benchmark_texts
    from specd.worker.training.broad_prompts import ID_BASE, build_broad_prompts
    from specd.worker.training.prompts import build_prompts

    broad = build_broad_prompts(0)
    assert [p.text for p in broad] == [p.text for p in build_broad_prompts(0)]  # deterministic
    assert [p.text for p in broad] != [p.text for p in build_broad_prompts(1)]
    assert len({p.text for p in broad}) == len(broad) >= 400
    assert {p.task for p in broad} == {"chat", "writing", "code", "structured"}
    assert {p.lang for p in broad} == {"en", "zh"}
    assert min(p.id for p in broad) == ID_BASE > len(build_prompts(0))
    assert not {p.text for p in broad} & {p.text for p in build_prompts(0)}
    bench = benchmark_texts()
    assert bench and not {p.text for p in broad} & bench  # the benchmark stays held out


def test_extra_prompts_join_train_and_leave_old_hashes_alone(target):
    from dataclasses import replace

    from specd import SpecdError
    from specd.worker.model import model_fingerprint
    from specd.worker.training.data import _select_prompts, _settings_key, data_hash
    from specd.worker.training.settings import DataSettings

    second = DataSettings(n_train=992, n_calib=48, n_test=32, max_new_tokens=256, batch_size=64,
                          sampled_fraction=0.0, extra_sampled=1)
    tok, fingerprint = target.tokenizer, model_fingerprint(target)
    plain = _select_prompts(tok, second)
    assert plain["extra"] == [] and "extra_prompts" not in _settings_key(second)
    # data sets made before --extra-prompts existed keep the hashes their drafters recorded
    art = Path("worker/artifacts/smollm2-135m")
    first_stage = json.loads((art / "semi-ar/metadata.json").read_text())["lineage"][0]
    assert data_hash(second, fingerprint, plain) == first_stage["data_hash"]
    first = DataSettings()  # the draft model's data set: the defaults
    assert data_hash(first, fingerprint, _select_prompts(tok, first)) == json.loads(
        (art / "draft-model/metadata.json").read_text())["data"]["hash"]
    wider = replace(second, extra_prompts=20)
    more = _select_prompts(tok, wider)
    assert all(more[s] == plain[s] for s in ("train", "calib", "test"))
    assert len(more["extra"]) == 20 and {p.task for p in more["extra"]} <= {
        "chat", "writing", "code", "structured"}
    assert data_hash(wider, fingerprint, more) != data_hash(second, fingerprint, plain)
    broad = replace(second, extra_prompts=461)  # the committed heads' data set
    assert data_hash(broad, fingerprint, _select_prompts(tok, broad)) == json.loads(
        (art / "semi-ar/metadata.json").read_text())["data"]["hash"]
    with pytest.raises(SpecdError, match="--extra-prompts 100000"):
        _select_prompts(tok, replace(second, extra_prompts=100_000))


def test_data_set_has_target_continuations_and_hidden_states(tiny_data, target):
    splits, directory = tiny_data
    meta = json.loads((directory / "meta.json").read_text())
    assert meta["splits"] == {"train": 12, "calib": 4, "test": 4}
    train = splits["train"]
    assert train.hidden.shape == (train.row_off[-1], 576)
    assert train.sampled.any() and not train.sampled.all()
    assert set(splits["test"].prompt_index).isdisjoint(set(train.prompt_index))
    # a greedy row's continuation is the target's own greedy choice: each token is the
    # recorded teacher's top-1 or ties with it (bf16 logits tie often)
    for s in np.flatnonzero(~train.sampled)[:3]:
        seq, P, r0 = train.sequence(int(s)), int(train.prompt_len[s]), int(train.row_off[s])
        cont = seq[P:]
        ids, lps = train.topk_ids[r0:r0 + len(cont)], train.topk_lp[r0:r0 + len(cont)]
        for j, tok in enumerate(cont):
            assert tok in ids[j]
            assert lps[j][list(ids[j]).index(tok)] == lps[j, 0]


def test_extra_prompts_extend_a_cached_data_set(tiny_data, target, monkeypatch):
    """A run with broad prompts reuses every cached batch and adds batches of its own."""
    from dataclasses import replace

    from specd.worker.model import model_fingerprint
    from specd.worker.training.broad_prompts import ID_BASE
    from specd.worker.training.data import DataSettings, generate_data, load_split

    splits, directory = tiny_data
    monkeypatch.setenv("SPECD_CACHE", str(directory.parent.parent))
    chunks = sorted(directory.parent.glob("chunks-*/*.pt"))
    settings = replace(DataSettings(n_train=12, n_calib=4, n_test=4, max_new_tokens=32,
                                    batch_size=12, sampled_fraction=0.25), extra_prompts=2)
    wider = generate_data(target, settings, model_fingerprint(target), progress=False)
    assert wider != directory
    added = sorted(set(directory.parent.glob("chunks-*/*.pt")) - set(chunks))
    assert [p.name.split("_")[0] for p in added] == ["extra"]  # the old batches were reused
    old, train = splits["train"], load_split(wider, "train")
    assert len(train) == len(old) + 2
    assert all(np.array_equal(train.sequence(i), old.sequence(i)) for i in range(len(old)))
    assert (train.prompt_index[len(old):] >= ID_BASE).all()
    meta = json.loads((wider / "meta.json").read_text())
    assert meta["extra_prompts"] == 2 and meta["splits"]["train"] == 12


def test_self_written_prompts_are_complete_new_and_deterministic(target, monkeypatch):
    """The target writes user requests itself (Magpie-style): each a finished turn, none
    excluded or repeated, the same ones again for the same seed."""
    from specd.worker.engine.llama import LlamaRunner
    from specd.worker.training import self_prompts as sp

    monkeypatch.setattr(sp, "BATCH", 12)  # small batches: a short test
    runner, tok = LlamaRunner(target.model), target.tokenizer
    prefix = sp.user_turn_prefix(tok)
    assert prefix.endswith("user\n") and "\x00" not in prefix
    first = sp.write_self_prompts(runner, tok, 6, seed=3, exclude=set(), progress=False)
    assert len(first) == 6 and [p.id for p in first] == list(range(sp.SELF_ID_BASE,
                                                                   sp.SELF_ID_BASE + 6))
    assert len({p.text for p in first}) == 6
    assert all(sp._words(p.text) >= sp.MIN_WORDS and "<|im_end|>" not in p.text for p in first)
    assert {(p.lang, p.task) for p in first} <= {(lang, task) for _, lang, task in sp.OPENERS}
    # an excluded text is never written; the rest come in the same order for the same seed
    again = sp.write_self_prompts(runner, tok, 3, seed=3, exclude={first[0].text},
                                  progress=False)
    assert [p.text for p in again] == [p.text for p in first[1:4]]


def test_self_prompts_join_train_in_batches_of_their_own(tiny_data, target, monkeypatch):
    from dataclasses import replace

    from specd.worker.model import model_fingerprint
    from specd.worker.training import self_prompts as sp
    from specd.worker.training.data import DataSettings, generate_data, load_split

    splits, directory = tiny_data
    monkeypatch.setenv("SPECD_CACHE", str(directory.parent.parent))
    monkeypatch.setattr(sp, "BATCH", 8)
    chunks = set(directory.parent.glob("chunks-*/*.pt"))
    settings = replace(DataSettings(n_train=12, n_calib=4, n_test=4, max_new_tokens=32,
                                    batch_size=12, sampled_fraction=0.25), self_prompts=2)
    wider = generate_data(target, settings, model_fingerprint(target), progress=False)
    assert wider != directory
    added = sorted(set(directory.parent.glob("chunks-*/*.pt")) - chunks)
    assert [p.name.split("_")[0] for p in added] == ["self"]  # every old batch reused
    assert len(list(directory.parent.glob("self-prompts-*.json"))) == 1  # cached
    old, train = splits["train"], load_split(wider, "train")
    assert len(train) == len(old) + 2
    assert (train.prompt_index[len(old):] >= sp.SELF_ID_BASE).all()
    assert json.loads((wider / "meta.json").read_text())["self_prompts"] == 2
    # fewer prompts later: the first ones of the cached file, no model run
    from specd.worker.training.data import cache_root

    def no_runner():
        raise AssertionError("the cache should have answered")

    written = json.loads(next(directory.parent.glob("self-prompts-*.json")).read_text())
    one = sp.self_prompts(no_runner, target.tokenizer, 1, settings.seed,
                          model_fingerprint(target), settings.dtype, cache_root(), set())
    assert len(written) == 2 and [p.text for p in one] == [written[0]["text"]]


@pytest.mark.slow
def test_short_training_run_learns(tiny_data, target):
    from specd.worker.training.train_heads import (
        Teacher,
        evaluate_heads,
        frequent_vocab,
        head_examples,
        make_net,
    )
    from specd.worker.training.trainer import TrainSettings, fit

    splits, _ = tiny_data
    train, calib = splits["train"], splits["calib"]
    K = 4
    vocab = frequent_vocab(train, 1024, [target.tokenizer.eos_token_id])
    net = make_net("semi-ar", target.model.config, K, vocab).bind(target)
    ev = Teacher(calib, head_examples(calib, K), net.sub_index(), "cpu")
    before = evaluate_heads(net.eval(), ev, K)
    tr = Teacher(train, head_examples(train, K), net.sub_index(), "cpu")
    from specd.worker.training.train_heads import loss_fn

    history = fit(net, len(tr.ex), tr.batch, loss_fn, lambda m: evaluate_heads(m, ev, K),
                  TrainSettings(epochs=12, batch_size=64, lr=3e-3, warmup_steps=5), None,
                  progress=False)
    after = history[-1]
    assert after["heldout_loss"] < before["heldout_loss"] - 0.2
    # a random draft (uniform over the drafter's vocabulary) is accepted ~1/len(vocab)
    rng = np.random.default_rng(0)
    truth = head_examples(calib, K).targets[:, 0]
    random_acc = float(np.mean(rng.choice(vocab.numpy(), size=len(truth)) == truth))
    assert after["heldout_acceptance"][0] > max(0.03, 10 * random_acc)
    assert after["heldout_acceptance"][0] > before["heldout_acceptance"][0]


@pytest.mark.slow
def test_context_layer_trains_on_whole_sequences(tiny_data, target):
    """Prompt hidden states line up with the target's own; the semi-ar drafter with a
    context layer learns on whole sequences; a warm start reproduces its source exactly."""
    from specd.worker.training.data import add_prompt_hidden, load_split
    from specd.worker.training.train_heads import (
        SequenceTeacher,
        evaluate_heads,
        frequent_vocab,
        loss_fn,
        make_net,
        warm_start,
    )
    from specd.worker.training.trainer import TrainSettings, fit

    _, directory = tiny_data
    add_prompt_hidden(target, directory, progress=False)
    train, calib = load_split(directory, "train"), load_split(directory, "calib")
    seq = [int(t) for t in train.sequence(0)]
    full = train.sequence_hidden(0).astype(np.float32)
    assert full.shape[0] == len(seq)
    with torch.inference_mode():  # the data is generated in bf16: compare directions
        ref = target.model.model(input_ids=torch.tensor([seq])).last_hidden_state[0].numpy()
    cos = (full * ref).sum(-1) / (np.linalg.norm(full, axis=-1) * np.linalg.norm(ref, axis=-1))
    assert cos.min() > 0.95, cos.min()

    K = 4
    vocab = frequent_vocab(train, 1024, [target.tokenizer.eos_token_id])
    net = make_net("semi-ar", target.model.config, K, vocab, context=True).bind(target)
    ev = SequenceTeacher(calib, K, net.sub_index(), "cpu")
    before = evaluate_heads(net.eval(), ev, K)
    tr = SequenceTeacher(train, K, net.sub_index(), "cpu")
    history = fit(net, tr.n, tr.batch, loss_fn, lambda m: evaluate_heads(m, ev, K),
                  TrainSettings(epochs=12, batch_size=4, lr=3e-3, warmup_steps=5), None,
                  progress=False)
    assert history[-1]["heldout_loss"] < before["heldout_loss"] - 0.2
    assert history[-1]["heldout_acceptance"][0] > before["heldout_acceptance"][0]

    plain = make_net("semi-ar", target.model.config, K, vocab).bind(target).eval()
    for p in plain.parameters():
        torch.nn.init.normal_(p, std=0.02)
    warm = make_net("semi-ar", target.model.config, K, vocab, context=True).bind(target).eval()
    warm_start(warm, plain)
    batch = ev.batch(np.arange(min(2, ev.n)))
    with torch.no_grad():
        from specd.worker.training.train_heads import head_logits

        ctx_logits, _ = head_logits(warm, batch)
        plain_batch = {k: v for k, v in batch.items() if not k.startswith(("seq_", "sel_"))}
        ref_logits, _ = head_logits(plain, plain_batch)
    assert torch.allclose(ctx_logits, ref_logits, atol=1e-5)  # zero projection: a no-op


@pytest.mark.slow
def test_feature_layers_data_and_training(tiny_data, target):
    """Layer features line up with HF's hidden_states at every row; semi-ar reading them
    learns; a warm start from a net without them is exactly that net at step 0."""
    from specd.worker.training.data import add_layer_hidden, load_split
    from specd.worker.training.train_heads import (
        evaluate_heads,
        frequent_vocab,
        head_logits,
        loss_fn,
        make_net,
        make_teacher,
        warm_start,
    )
    from specd.worker.training.trainer import TrainSettings, fit

    layers = [2, 15, 26]
    _, directory = tiny_data
    add_layer_hidden(target, directory, tuple(layers), progress=False)
    train, calib = load_split(directory, "train"), load_split(directory, "calib")
    assert train.layer_hidden.shape == (train.hidden.shape[0], 3, train.hidden.shape[1])
    seq = [int(t) for t in train.sequence(1)]
    P = int(train.prompt_len[1])
    rows = np.asarray(train.layer_hidden[train.row_off[1]:train.row_off[2]], dtype=np.float32)
    with torch.inference_mode():
        hs = target.model.model(input_ids=torch.tensor([seq]), output_hidden_states=True).hidden_states
    for j, li in enumerate(layers):  # the data is generated in bf16: compare directions
        ref = hs[li + 1][0, P - 1:].numpy()
        got = rows[:, j]
        cos = (got * ref).sum(-1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(ref, axis=-1))
        assert cos.min() > 0.95, (li, cos.min())

    K = 4
    vocab = frequent_vocab(train, 1024, [target.tokenizer.eos_token_id])
    net = make_net("semi-ar", target.model.config, K, vocab, feature_layers=layers).bind(target)
    ev = make_teacher(net, calib, K)
    before = evaluate_heads(net.eval(), ev, K)
    tr = make_teacher(net, train, K)
    history = fit(net, tr.n, tr.batch, loss_fn, lambda m: evaluate_heads(m, ev, K),
                  TrainSettings(epochs=12, batch_size=64, lr=3e-3, warmup_steps=5), None,
                  progress=False)
    assert history[-1]["heldout_loss"] < before["heldout_loss"] - 0.2
    assert net.layer_proj.weight.abs().sum() > 0  # the features were learned from

    plain = make_net("semi-ar", target.model.config, K, vocab).bind(target).eval()
    for p in plain.parameters():
        torch.nn.init.normal_(p, std=0.02)
    warm = make_net("semi-ar", target.model.config, K, vocab, feature_layers=layers).bind(target)
    warm_start(warm.eval(), plain)
    batch = ev.batch(np.arange(8))
    with torch.no_grad():
        ref_logits, _ = head_logits(plain, {k: v for k, v in batch.items() if k != "layers"})
        warm_logits, _ = head_logits(warm, batch)
    assert torch.allclose(warm_logits, ref_logits, atol=1e-5)


@pytest.mark.slow
def test_backbone_mlp_learns_warm_starts_exactly_and_round_trips(tiny_data, target, tmp_path):
    """The semi-ar backbone's optional SwiGLU MLP: a warm start from a net without it is that
    net at step 0 (zero output projection); trained, the MLP moves off zero and held-out loss
    falls; the artifact keeps the width in its config and loads to the same proposals."""
    from specd.worker.drafters.artifacts import load_drafter, save_drafter
    from specd.worker.model import model_fingerprint
    from specd.worker.training import train_heads as th
    from specd.worker.training.data import load_split
    from specd.worker.training.trainer import TrainSettings, fit

    _, directory = tiny_data
    train, calib = load_split(directory, "train"), load_split(directory, "calib")
    K = 4
    vocab = th.frequent_vocab(train, 1024, [target.tokenizer.eos_token_id])
    torch.manual_seed(0)
    plain = th.make_net("semi-ar", target.model.config, K, vocab).bind(target).eval()
    for p in plain.parameters():
        torch.nn.init.normal_(p, std=0.02)
    net = th.make_net("semi-ar", target.model.config, K, vocab, backbone_mlp=256).bind(target)
    th.warm_start(net, plain)
    ev = th.make_teacher(net, calib, K)
    batch = ev.batch(np.arange(8))
    with torch.no_grad():
        ref_logits, _ = th.head_logits(plain, batch)
        warm_logits, _ = th.head_logits(net.eval(), batch)
    assert torch.allclose(warm_logits, ref_logits, atol=1e-5)

    before = th.evaluate_heads(net, ev, K)
    tr = th.make_teacher(net, train, K)
    history = fit(net, tr.n, tr.batch, th.loss_fn, lambda m: th.evaluate_heads(m, ev, K),
                  TrainSettings(epochs=6, batch_size=64, lr=3e-3, warmup_steps=5), None,
                  progress=False)
    assert history[-1]["heldout_loss"] < before["heldout_loss"] - 0.1
    assert net.mlp_out.weight.abs().sum() > 0  # the MLP was learned, not left at zero

    out = save_drafter(net.eval(), tmp_path / "semi", "semi-ar", model_fingerprint(target),
                       "smollm2-135m", {}, dtype="float32")
    loaded = load_drafter(out, target)
    assert loaded.metadata["config"]["backbone_mlp"] == 256
    h, last = torch.randn(3, 576), torch.tensor([5, 6, 7])
    a, b = net.propose(h, last, K), loaded.propose(h, last, K)
    assert torch.equal(a.tokens, b.tokens) and torch.allclose(a.confidence, b.confidence)


@pytest.mark.slow
def test_artifact_round_trip_and_fingerprint_check(tiny_data, target, tmp_path):
    from specd import SpecdError
    from specd.worker.drafters.artifacts import load_drafter, read_metadata, save_drafter
    from specd.worker.drafters.nets import ParallelHeads
    from specd.worker.model import LoadedModel, model_fingerprint

    torch.manual_seed(0)
    net = ParallelHeads(576, 3, _tiny_vocab(target), 49152).bind(target)
    for p in net.parameters():
        torch.nn.init.normal_(p, std=0.05)
    net.calib_a.fill_(0.5)
    fp = model_fingerprint(target)
    out = save_drafter(net, tmp_path / "heads", "parallel", fp, "smollm2-135m",
                       {"data": {"hash": "abc"}}, dtype="float32")
    loaded = load_drafter(out, target)
    assert loaded.method == "parallel" and loaded.metadata["data"]["hash"] == "abc"
    h, last = torch.randn(2, 576), torch.tensor([5, 6])
    a, b = net.eval().propose(h, last, 3), loaded.propose(h, last, 3)
    assert torch.equal(a.tokens, b.tokens) and torch.allclose(a.confidence, b.confidence)
    assert read_metadata(out)["target"]["fingerprint"] == fp

    other_model = copy.deepcopy(target.model)
    with torch.no_grad():
        first = sorted(other_model.state_dict())[0]
        other_model.state_dict()[first].add_(0.01)
    other = LoadedModel(target.source, other_model, target.tokenizer, target.device,
                        target.dtype)
    assert model_fingerprint(other) != fp
    with pytest.raises(SpecdError, match="fingerprint"):
        load_drafter(out, other)
    with pytest.raises(SpecdError, match="no drafter artifact"):
        load_drafter(tmp_path / "missing", target)


def test_calibration_lowers_ece_on_held_out_data():
    from specd.worker.training.calibrate import apply_platt, ece, fit_per_position

    # an over-confident scorer: true acceptance is sigmoid(z/3 - 1) while it claims sigmoid(z)
    rng = np.random.default_rng(0)
    z = rng.normal(1.5, 2.0, size=(4000, 3))
    y = (rng.random(z.shape) < 1 / (1 + np.exp(-(z / 3 - 1)))).astype(float)
    alive = np.ones_like(z, dtype=bool)
    a, b = fit_per_position(z[:2000], y[:2000], alive[:2000])
    held_z, held_y = z[2000:], y[2000:]
    before = ece(1 / (1 + np.exp(-held_z)).ravel(), held_y.ravel())
    after = ece(apply_platt(held_z, a, b).ravel(), held_y.ravel())
    assert before > 0.15 and after < 0.03


# ---------------------------------------------------------------- the committed artifacts

ARTIFACTS = Path(__file__).resolve().parents[1] / "worker" / "artifacts" / "smollm2-135m"


@pytest.fixture(scope="module")
def greedy_runs(target, chat_prompt_ids):
    """Prompts the drafters never saw, with the float32 target's greedy continuations."""
    from specd.worker.reference import greedy_decode

    runs = []
    for text in ("Explain how a rainbow forms, in a few sentences.",
                 "List five tips for better sleep.",
                 "请列出三种常见的水果，并简单介绍。"):
        prompt = chat_prompt_ids(text)
        runs.append((prompt, greedy_decode(target.model, prompt, 40,
                                           target.tokenizer.eos_token_id)))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("method", ["parallel", "semi-ar", "draft-model"])
def test_committed_artifacts_load_and_beat_chance(method, target, greedy_runs):
    from specd.worker.drafters.artifacts import load_drafter
    from specd.worker.training.evaluate import run_lengths, tau_walk

    assert (ARTIFACTS / method / "metadata.json").is_file(), "committed artifact missing"
    net = load_drafter(method, target)
    meta = net.metadata
    assert meta["method"] == method and meta["command"].startswith("specd train")
    assert meta["data"]["hash"] and meta["training"]["wall_seconds"] > 0
    firsts, committed, rounds = [], 0, 0
    for prompt, seq in greedy_runs:
        rl = run_lengths(target, net, prompt, seq, 5)
        firsts.append(rl["match"][:, 0])
        c, r = tau_walk(rl["A"], len(seq), 5)
        committed, rounds = committed + c, rounds + r
    first = float(np.concatenate(firsts).mean())
    chance = 1.0 / meta["config"]["num_vocab"]  # a uniformly random draft token
    # acceptance varies a lot by prompt (0.05-0.8 for one head); chance is ~0.0003
    assert first > max(0.1, 100 * chance), f"{method}: first-position acceptance {first:.3f}"
    assert committed / rounds > 1.1  # tokens per target forward at K=5; chance gives ~1.0


@pytest.mark.slow
@pytest.mark.parametrize("method", ["semi-ar", "draft-model"])
def test_eval_verify_loop_is_lossless(method, target, greedy_runs):
    """The evaluation's real speculative loop commits exactly the target's greedy tokens."""
    from specd.worker.drafters.artifacts import load_drafter
    from specd.worker.training.evaluate import verify_loop

    net = load_drafter(method, target)
    for prompt, seq in greedy_runs[:2]:
        run = verify_loop(target, net, prompt, 5, len(seq), target.tokenizer.eos_token_id)
        assert run["tokens"] == seq
        assert run["rounds"] < len(seq)  # some drafts were accepted


def test_feature_layer_choice():
    import argparse

    from specd import SpecdError
    from specd.worker.training.jobs import _feature_layers
    from specd.worker.training.train_heads import default_feature_layers

    assert default_feature_layers(30) == [2, 15, 26]  # SmolLM2-135M
    assert default_feature_layers(4) == []

    def args(text, context=False):
        return argparse.Namespace(feature_layers=text, context_layer=context)

    assert _feature_layers(args("auto"), "semi-ar", 30) == [2, 15, 26]
    assert _feature_layers(args("auto"), "parallel", 30) == []
    assert _feature_layers(args("auto", context=True), "semi-ar", 30) == []
    assert _feature_layers(args("none"), "semi-ar", 30) == []
    assert _feature_layers(args("3,9"), "semi-ar", 30) == [3, 9]
    for bad in ("3,x", "31", ","):
        with pytest.raises(SpecdError, match="--feature-layers"):
            _feature_layers(args(bad), "semi-ar", 30)
    with pytest.raises(SpecdError, match="cannot be combined"):
        _feature_layers(args("3", context=True), "semi-ar", 30)


def test_warm_starts_record_lineage_and_never_share_checkpoints(tmp_path):
    import json

    from specd.worker.drafters.artifacts import FORMAT, METADATA_FILE, WEIGHTS_FILE
    from specd.worker.training.jobs import _lineage, _warm_tag, stage_of

    def artifact(name, weights, **meta):
        d = tmp_path / name
        d.mkdir()
        (d / WEIGHTS_FILE).write_bytes(weights)
        (d / METADATA_FILE).write_text(json.dumps({"format": FORMAT, **meta}))
        return str(d)

    first = artifact("s1", b"one", command="specd train semi-ar --epochs 2",
                     data={"hash": "abc"}, training={"settings": {"lr": 3e-3},
                                                     "wall_seconds": 10.0,
                                                     "history": [{"heldout_tau5": 2.7}]})
    second = artifact("s2", b"two", lineage=[{"command": "a"}, {"command": "b"}])
    assert _warm_tag(None, None) == ""
    assert _warm_tag(first, None) != _warm_tag(second, None)
    assert _warm_tag(first, None).startswith("-warm")
    assert _lineage(None, None) == []
    assert _lineage(first, None) == [stage_of(json.loads((tmp_path / "s1" / METADATA_FILE).read_text()))]
    assert _lineage(first, None)[0] == {"command": "specd train semi-ar --epochs 2", "data_hash": "abc",
                                       "settings": {"lr": 3e-3}, "wall_seconds": 10.0,
                                       "heldout_tau5": 2.7}
    assert _lineage(second, None) == [{"command": "a"}, {"command": "b"}]


def test_eval_prompts_come_from_a_prompt_file_when_given(target, tmp_path):
    import argparse

    from specd.worker.training.data import chat_ids
    from specd.worker.training.jobs import eval_prompts

    path = tmp_path / "p.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "Why do cats purr?"}]}\n'
                    '{"prompt": "Once upon a time"}\n')
    args = argparse.Namespace(eval_prompts_file=str(path), eval_prompts=None)
    got = eval_prompts(args, target, tmp_path)
    assert got[0] == chat_ids(target.tokenizer, "Why do cats purr?") and len(got) == 2
    args.eval_prompts = 1
    assert eval_prompts(args, target, tmp_path) == got[:1]
