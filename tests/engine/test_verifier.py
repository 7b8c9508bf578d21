"""Verification math: greedy prefix match, speculative sampling, target processing."""

from __future__ import annotations

import torch

from specd.worker.engine.verifier import accept_greedy, target_probs, verify_sampling


def test_accept_greedy():
    assert accept_greedy([5, 6, 7], [5, 6, 9, 1]) == (2, 9)
    assert accept_greedy([5, 6, 7], [5, 6, 7, 1]) == (3, 1)  # all pass: bonus token
    assert accept_greedy([], [4]) == (0, 4)  # plain decoding
    assert accept_greedy([1], [2, 3]) == (0, 2)


def test_verify_sampling_rules():
    v = 4
    p = torch.tensor([[[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.25, 0.25, 0.25, 0.25]]])
    q = torch.zeros(1, 2, v)
    q[0, 0, 1] = 1.0
    q[0, 1, 2] = 1.0
    draft = torch.tensor([[1, 2]])
    lengths = torch.tensor([2])
    # u < p/q = 0.5 accepts position 0; position 1 has p/q = 1: always accepted; bonus from p[2]
    acc, nxt = verify_sampling(p, q, draft, lengths, torch.tensor([[0.4, 0.99]]), torch.tensor([0.6]))
    assert acc.item() == 2 and nxt.item() == 2
    # rejection at 0: residual max(0, p - q) = [0.5, 0, 0, 0] -> token 0 whatever u
    acc, nxt = verify_sampling(p, q, draft, lengths, torch.tensor([[0.6, 0.0]]), torch.tensor([0.99]))
    assert acc.item() == 0 and nxt.item() == 0
    # length 1: position 1 is not verified; bonus comes from p[1] (one-hot at 2)
    acc, nxt = verify_sampling(p, q, draft, torch.tensor([1]), torch.tensor([[0.1, 0.0]]),
                               torch.tensor([0.3]))
    assert acc.item() == 1 and nxt.item() == 2


def test_target_probs_top_k_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]] * 3))
    p = target_probs(logits, torch.ones(3), torch.tensor([0, 2, 0]), torch.tensor([1.0, 1.0, 0.8]))
    assert torch.allclose(p[0], torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=1e-6)
    assert torch.allclose(p[1], torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=1e-6)
    assert torch.allclose(p[2], torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=1e-6)
    hot = target_probs(logits[:1], torch.tensor([0.5]), torch.tensor([0]), torch.tensor([1.0]))
    assert hot[0, 0] > 0.5
