"""The batched Llama forward equals HF; KV rollback equals a fresh prefill; memory bounds."""

from __future__ import annotations

import pytest
import torch

from specd.worker.engine.llama import Row

pytestmark = pytest.mark.model


def hf_logits(target, ids):
    with torch.inference_mode():
        return target.model(torch.tensor([ids])).logits[0].float()


def test_ragged_batch_matches_hf(target, runner, chat_prompt_ids):
    a = chat_prompt_ids("What is the capital of France?")
    b = chat_prompt_ids("Write a haiku about the sea, please, in English.")
    cache = runner.new_cache(3, 256)
    sa, sb = cache.allocate(), cache.allocate()
    # ragged: a prefills 10 tokens, b all of it; then a continues with a 3-token "verify" row
    out = runner.forward(cache, [Row(sa, a[:10], "all"), Row(sb, b, "last")])
    ref_a, ref_b = hf_logits(target, a), hf_logits(target, b)
    assert out.counts == [10, 1]
    assert torch.allclose(out.logits[:10], ref_a[:10], atol=2e-3)
    assert torch.allclose(out.logits[10], ref_b[-1], atol=2e-3)
    out = runner.forward(cache, [Row(sa, a[10:13], "all"), Row(sb, [a[0]], "none")])
    assert torch.allclose(out.logits, ref_a[10:13], atol=2e-3)
    assert out.hidden.shape == (3, target.model.config.hidden_size)
    assert cache.lengths[sa] == 13 and cache.lengths[sb] == len(b) + 1


def test_rollback_equals_fresh_prefill(target, runner, chat_prompt_ids):
    ids = chat_prompt_ids("Count from one to ten.")
    committed, rejected = ids[:-3], [17, 923, 4021]
    cache = runner.new_cache(2, 256)
    s = cache.allocate()
    runner.forward(cache, [Row(s, committed, "none")])
    runner.forward(cache, [Row(s, rejected, "all")])  # a verify pass whose drafts fail
    cache.truncate(s, len(committed))  # roll back: no recomputation
    after = runner.forward(cache, [Row(s, ids[-3:], "all")]).logits
    fresh = runner.new_cache(1, 256)
    f = fresh.allocate()
    runner.forward(fresh, [Row(f, committed, "none")])
    n = len(committed)
    assert torch.equal(cache.k[:, s, :, :n], fresh.k[:, f, :, :n])
    assert torch.equal(cache.v[:, s, :, :n], fresh.v[:, f, :, :n])
    again = runner.forward(fresh, [Row(f, ids[-3:], "all")]).logits
    assert torch.allclose(after, again, atol=1e-5)
    assert torch.allclose(after, hf_logits(target, ids)[-3:], atol=2e-3)


def test_padded_forward_equals_unpadded(runner, chat_prompt_ids):
    """pad_to runs a 3-token forward as 5 tokens: same outputs, same committed cache, and the
    pad tokens' K/V past the slot's length never reach a later forward."""
    ids = chat_prompt_ids("Name three rivers.")
    head, tail = ids[:-4], ids[-4:]
    plain, padded = runner.new_cache(1, 256), runner.new_cache(1, 256)
    p, q = plain.allocate(), padded.allocate()
    runner.forward(plain, [Row(p, head, "none")])
    runner.forward(padded, [Row(q, head, "none")])
    ref = runner.forward(plain, [Row(p, tail[:3], "all")])
    runner.pad_to = (1, 2, 5, 5, 5)
    try:
        out = runner.forward(padded, [Row(q, tail[:3], "all")])
        assert out.counts == [3] and out.logits.shape[0] == 3
        assert padded.lengths[q] == plain.lengths[p] == len(head) + 3
        assert torch.allclose(out.logits, ref.logits, atol=1e-4)
        assert torch.equal(out.logits.argmax(-1), ref.logits.argmax(-1))
        n = len(head) + 3
        assert not torch.equal(padded.k[:, q, :, n:n + 2], plain.k[:, p, :, n:n + 2])  # pads ran
        nxt_pad = runner.forward(padded, [Row(q, tail[3:], "all")]).logits
    finally:
        runner.pad_to = ()
    nxt = runner.forward(plain, [Row(p, tail[3:], "all")]).logits
    assert torch.allclose(nxt_pad, nxt, atol=1e-4)
    # no room for the pads in the context: the forward runs unpadded
    tight = runner.new_cache(1, len(head) + 3)
    t = tight.allocate()
    runner.forward(tight, [Row(t, head, "none")])
    runner.pad_to = (1, 2, 5, 5, 5)
    try:
        assert runner._padded_counts(tight, [len(head)], [3]) == [3]
        assert runner._padded_counts(padded, [0], [3]) == [5]
        assert runner._padded_counts(padded, [0], [4]) == [5]
        assert runner._padded_counts(padded, [0], [6]) == [6]  # beyond the dense table
        # a lone row pads by its own table when measured; more rows by the main one
        runner.pad_to_one_row = (1, 4, 4, 4)
        assert runner._padded_counts(padded, [0], [3]) == [4]
        assert runner._padded_counts(padded, [0, 0], [1, 2]) == [3, 2]
    finally:
        runner.pad_to, runner.pad_to_one_row = (), ()


def test_decode_rows_attend_apart_from_verify_rows(runner, chat_prompt_ids):
    """A round where one row verifies drafts and the others decode one token: the one-token
    rows run their own attention call unpadded (not padded to the verify row's length), and
    every row's logits equal that row run alone."""
    prompts = [chat_prompt_ids(t) for t in ("Name a colour.", "Count to three.", "Say hi.")]
    new_tokens = [[17], [17, 923, 4021, 88], [17]]
    cache = runner.new_cache(3, 128)
    slots = [cache.allocate() for _ in prompts]
    runner.forward(cache, [Row(s, p, "none") for s, p in zip(slots, prompts, strict=True)])
    # rows not in slot order: a mix-up of row index and slot would show
    order = [2, 1, 0]
    rows = [Row(slots[i], new_tokens[i], "all") for i in order]
    starts = [cache.lengths[r.slot] for r in rows]
    groups = runner._attention_groups(rows, starts, [len(r.tokens) for r in rows])
    # the decode rows (slots 0 and 2) read the cache in place over slots 0..2, the verify
    # row's slot a masked gap
    assert sorted(tuple(g.valid.shape) for g in groups) == [(1, 4), (3, 1)]
    decode = next(g for g in groups if g.valid.shape == (3, 1))
    assert decode.slots == slice(0, 3) and decode.valid[:, 0].tolist() == [True, False, True]
    out = runner.forward(cache, rows)
    assert out.counts == [1, 4, 1]
    for j, i in enumerate(order):
        p, t = prompts[i], new_tokens[i]
        alone = runner.new_cache(1, 128)
        a = alone.allocate()
        runner.forward(alone, [Row(a, p, "none")])
        ref = runner.forward(alone, [Row(a, t, "all")]).logits
        got = out.logits[out.starts[j]: out.starts[j] + out.counts[j]]
        assert torch.allclose(got, ref, atol=1e-4)
        assert torch.equal(got.argmax(-1), ref.argmax(-1))


@pytest.mark.parametrize("used, in_place", [([0, 2, 5], True), ([0, 5], False)])
def test_scattered_decode_rows_equal_each_row_alone(runner, chat_prompt_ids, used, in_place):
    """One-token rows on scattered slots: read in place over their range when the gaps are
    no more than the rows (dummy queries in the gaps), else copied out; either way each row's
    logits equal that row run alone."""
    texts = ("Name a colour.", "Count to three.", "Say hi.")
    prompts = [chat_prompt_ids(t) for t in texts][:len(used)]
    cache = runner.new_cache(6, 128)
    slots = [cache.allocate() for _ in range(6)]
    for s in slots:
        if s not in used:
            cache.release(s)
    runner.forward(cache, [Row(s, p, "none") for s, p in zip(used, prompts, strict=True)])
    rows = [Row(s, [17], "all") for s in used]
    [group] = runner._attention_groups(rows, [cache.lengths[s] for s in used], [1] * len(used))
    assert isinstance(group.slots, slice) == in_place
    out = runner.forward(cache, rows)
    for j, p in enumerate(prompts):
        alone = runner.new_cache(1, 128)
        a = alone.allocate()
        runner.forward(alone, [Row(a, p, "none")])
        ref = runner.forward(alone, [Row(a, [17], "all")]).logits
        assert torch.allclose(out.logits[j: j + 1], ref, atol=1e-4)


def test_cache_bounds(runner):
    cache = runner.new_cache(2, 32)
    s = cache.allocate()
    cache.allocate()
    with pytest.raises(RuntimeError):
        cache.allocate()
    with pytest.raises(ValueError, match="max_context"):
        runner.forward(cache, [Row(s, [1] * 33, "last")])
    runner.forward(cache, [Row(s, [1] * 8, "last")])
    assert cache.used_tokens == 8 and cache.usage() == 8 / 64
    cache.release(s)
    assert cache.used_tokens == 0 and cache.free_slots == 1


def test_layer_hidden_matches_hf(target, runner, chat_prompt_ids):
    """``forward(layers=...)`` returns the residual stream after those decoder layers at the
    wanted positions, as HF's ``output_hidden_states`` gives it (hidden_states[i + 1])."""
    a = chat_prompt_ids("Name two rivers.")
    b = chat_prompt_ids("Count from one to five.")
    with torch.inference_mode():
        ref_a = target.model.model(torch.tensor([a]), output_hidden_states=True).hidden_states
        ref_b = target.model.model(torch.tensor([b]), output_hidden_states=True).hidden_states
    cache = runner.new_cache(2, 256)
    sa, sb = cache.allocate(), cache.allocate()
    out = runner.forward(cache, [Row(sa, a, "all"), Row(sb, b, "last")], logits=False,
                         layers=(2, 15))
    assert out.layer_hidden.shape == (len(a) + 1, 2, target.model.config.hidden_size)
    for j, li in enumerate((2, 15)):
        assert torch.allclose(out.layer_hidden[: len(a), j], ref_a[li + 1][0], atol=1e-3, rtol=1e-3)
        assert torch.allclose(out.layer_hidden[len(a), j], ref_b[li + 1][0, -1], atol=1e-3, rtol=1e-3)
    assert not torch.allclose(out.layer_hidden[:, 0], out.layer_hidden[:, 1])
    with pytest.raises(ValueError, match="outside"):
        runner.forward(cache, [Row(sa, a[:1], "last")], layers=(99,))


def test_row_totals_straddle_every_tile_step():
    """A busy round is R one-token rows plus a few drafts: its table must hold R + 1 (the
    first drafted token crosses a 16-row kernel tile at R = 16) and both sides of each
    multiple of 16 up to R x TOKENS_PER_ROW."""
    from specd.worker.engine.cost import TOKENS_PER_ROW, _row_totals, _spread

    totals = _row_totals(16, 512)
    assert totals[:2] == [16, 17] and {32, 33, 48, 49, 64, 65, 96, 97} <= set(totals)
    assert max(totals) == 16 * TOKENS_PER_ROW and totals == sorted(set(totals))
    assert _row_totals(16, 40)[-1] <= 40
    assert _spread(17, 16) == [2] + [1] * 15  # the extra token on one row


def test_cost_profile_measures_rows_of_one_and_rows_of_drafts(runner):
    """Start-up profiling times rows of one token and R = 1, 2, 4 rows carrying R, R + 1, ...
    tokens, every table monotone, and leaves the cache and the runner's padding as it found
    them."""
    from specd.worker.engine.cost import ONE_ROW_TOKENS, measure_costs

    cache = runner.new_cache(4, 64)
    runner.pad_to, runner.pad_to_one_row = (1, 2), (2, 2)
    try:
        costs = measure_costs(runner, cache, max_tokens=8, repeats=1)
    finally:
        pad = runner.pad_to, runner.pad_to_one_row
        runner.pad_to, runner.pad_to_one_row = (), ()
    assert pad == ((1, 2), (2, 2)) and cache.free_slots == 4
    assert costs.tokens == tuple(range(1, 9))
    rows = dict(costs.by_rows)
    assert sorted(rows) == [1, 2, 4]
    assert rows[1].tokens == tuple(range(1, 9))  # one row: 1..17 tokens, capped at max_tokens
    # the grid's points between whole multiples too (the dense start: every size)
    assert rows[2].tokens == tuple(range(2, 9)) and rows[4].tokens == tuple(range(4, 9))
    for table in (costs, *rows.values()):
        assert all(a <= b for a, b in zip(table.seconds, table.seconds[1:], strict=False))
        assert all(s > 0 for s in table.seconds)
    # padding: a lone row by its own shape (dense from 1), more rows by the main table's
    assert len(rows[1].pad_to) == 8 and costs.one_row_pad_to() == rows[1].pad_to
    assert all(p >= t for t, p in enumerate(rows[1].pad_to, 1))
    assert rows[2].pad_to == () and rows[4].pad_to == ()
    assert costs.for_rows(1) is rows[1] and costs.for_rows(3) is rows[4]
    assert ONE_ROW_TOKENS >= 17  # room for the longest draft a policy allows (k_max 16)
