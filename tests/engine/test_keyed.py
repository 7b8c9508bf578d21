"""Keyed noise and the coupled verification rule (seeded sampling), as pure functions."""

from __future__ import annotations

import torch

from specd.worker.drafters.nets import sample_from_logits
from specd.worker.engine import keyed
from specd.worker.engine.verifier import coupled_samples, verify_coupled


def test_noise_is_a_function_of_seed_position_and_token_only():
    ids = torch.arange(1000)
    a = keyed.keyed_exponential([7, 7, 8], [0, 1, 0], ids)
    # the same (seed, position) in another row, another batch, another order: same values
    b = keyed.keyed_exponential([8, 1, 7], [0, 5, 1], ids)
    assert torch.equal(a[2], b[0]) and torch.equal(a[1], b[2])
    # a subset of the vocabulary (a drafter's sub-vocabulary) sees the same values
    sub = torch.tensor([999, 3, 500])
    assert torch.equal(keyed.keyed_exponential([7], [1], sub)[0], a[1, sub])
    # other seeds / positions give other noise
    assert not torch.equal(a[0], a[1]) and not torch.equal(a[0], a[2])
    # chunking changes nothing
    p = torch.softmax(torch.randn(40, 1000, generator=torch.Generator().manual_seed(0)), -1)
    seeds, positions = list(range(40)), [3] * 40
    whole = keyed.keyed_sample(p, keyed.keyed_exponential(seeds, positions, ids))
    old = keyed.CHUNK_ELEMENTS
    try:
        keyed.CHUNK_ELEMENTS = 3000  # 3 rows a chunk
        assert torch.equal(keyed.keyed_choice(p, seeds, positions), whole)
    finally:
        keyed.CHUNK_ELEMENTS = old


def test_noise_is_standard_exponential():
    e = keyed.keyed_exponential(list(range(50)), [0] * 50, torch.arange(2000)).double().flatten()
    assert abs(float(e.mean()) - 1.0) < 0.01 and abs(float(e.var()) - 1.0) < 0.03
    assert float(e.min()) > 0
    # P(E > 1) = 1/e, per-position streams too
    f = keyed.keyed_exponential([3] * 2000, list(range(2000)), torch.arange(50)).flatten()
    assert abs(float((f > 1).double().mean()) - 1 / torch.e) < 0.01


def test_keyed_sample_follows_p_over_seeds():
    p = torch.tensor([0.5, 0.25, 0.125, 0.0625, 0.0625, 0.0])
    n = 40_000
    picks = keyed.keyed_choice(p.expand(n, -1).contiguous(), list(range(n)), [0] * n)
    freq = torch.bincount(picks, minlength=6).double() / n
    assert torch.allclose(freq, p.double(), atol=0.01), freq
    assert freq[5] == 0  # p == 0 never wins (top-k / top-p cuts)


def test_verify_coupled_accepts_exactly_the_keyed_samples():
    torch.manual_seed(0)
    p = torch.softmax(torch.randn(2, 4, 16) * 2, -1)
    seeds, positions = [5, 9], [10, 0]
    lengths = torch.tensor([3, 1])
    t = coupled_samples(p, seeds, positions, lengths)
    # each keyed sample depends on its own (seed, absolute position) only
    assert int(t[0, 2]) == int(keyed.keyed_choice(p[0, 2:3], [5], [12])[0])
    assert int(t[1, 1]) == int(keyed.keyed_choice(p[1, 1:2], [9], [1])[0])
    assert int(t[1, 2]) == 0 and int(t[1, 3]) == 0  # padding past the row's length
    wrong = (t[:, :3] + 1) % 16
    # all drafts equal the samples: all accepted, the bonus is the keyed sample after them
    acc, nxt = verify_coupled(p, seeds, positions, t[:, :3].clone(), lengths)
    assert acc.tolist() == [3, 1] and nxt.tolist() == [int(t[0, 3]), int(t[1, 1])]
    # a mismatch at position 1 of row 0: the correction is the keyed sample there
    d = t[:, :3].clone()
    d[0, 1] = wrong[0, 1]
    d[1, 0] = wrong[1, 0]
    acc, nxt = verify_coupled(p, seeds, positions, d, lengths)
    assert acc.tolist() == [1, 0] and nxt.tolist() == [int(t[0, 1]), int(t[1, 0])]


def test_seeded_draft_uses_the_same_noise():
    """A drafter's keyed draw at q == p is the target's keyed sample: always accepted."""
    torch.manual_seed(1)
    logits = torch.randn(3, 32)
    vocab_ids = torch.arange(100, 132)  # a sub-vocabulary inside a 200-token vocabulary
    seeds, positions = [1, 2, 3], [4, 4, 9]
    noise = keyed.keyed_exponential(seeds, positions, vocab_ids)
    ids, q = sample_from_logits(logits, vocab_ids, 200, 0.8, with_q=False, noise=noise)
    assert q is None
    p = torch.zeros(3, 200)
    p[:, 100:132] = torch.softmax(logits / 0.8, -1)
    assert torch.equal(ids, keyed.keyed_choice(p, seeds, positions))
