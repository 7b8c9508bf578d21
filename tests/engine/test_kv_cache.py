"""The slot cache: finished requests' holes closed by moving rows down, their data intact."""

from __future__ import annotations

import torch

from specd.worker.engine.kv_cache import KVCache


def filled_cache(slots: int, lengths: list[int]) -> KVCache:
    cache = KVCache(num_layers=2, slots=slots, max_context=8, kv_heads=2, head_dim=3,
                    dtype=torch.float32, device="cpu")
    cache.k.copy_(torch.randn_like(cache.k))
    cache.v.copy_(torch.randn_like(cache.v))
    for n in lengths:
        cache.lengths[cache.allocate()] = n
    return cache


def test_compact_moves_the_highest_rows_into_the_holes():
    cache = filled_cache(6, [3, 5, 2, 7, 4, 1])
    k0, v0 = cache.k.clone(), cache.v.clone()
    for slot in (1, 3):
        cache.release(slot)
    assert cache.compact() == {5: 1, 4: 3}
    assert cache.lengths[:4] == [3, 1, 2, 4] and cache.lengths[4:] == [0, 0]
    for old, new in ((5, 1), (4, 3), (0, 0), (2, 2)):
        n = cache.lengths[new]
        assert torch.equal(cache.k[:, new, :, :n], k0[:, old, :, :n])
        assert torch.equal(cache.v[:, new, :, :n], v0[:, old, :, :n])
    assert cache.free_slots == 2 and cache.used_tokens == 10
    assert [cache.allocate(), cache.allocate()] == [4, 5]  # newcomers extend the range


def test_compact_leaves_a_contiguous_cache_alone():
    cache = filled_cache(4, [3, 5, 2])
    k0 = cache.k.clone()
    assert cache.compact() == {}
    cache.release(2)  # the top row: 0..1 are still contiguous
    assert cache.compact() == {}
    assert torch.equal(cache.k, k0)
    empty = filled_cache(3, [])
    assert empty.compact() == {}


def test_compact_keyed_updates_the_owners_slots():
    cache = filled_cache(5, [2, 2, 2, 2, 2])
    owners = {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4}
    for key in ("a", "c"):
        cache.release(owners.pop(key))
    cache.compact_keyed(owners)
    assert owners == {"b": 1, "d": 2, "e": 0}
    assert sorted(cache.lengths) == [0, 0, 2, 2, 2]
