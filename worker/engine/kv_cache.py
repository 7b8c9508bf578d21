"""A preallocated, slot-based KV cache for continuous batching.

One slab per K and V: ``[layers, slots, kv_heads, max_context, head_dim]``. A request holds one
slot; its length is the number of committed tokens whose keys/values are in the cache.
Rolling back rejected draft positions is just lowering the length (the stale entries beyond it
are overwritten by the next forward and masked until then), so no recomputation is needed.
Memory is bounded by construction: ``slots * max_context`` tokens, allocated once.

Requests finish in any order, leaving holes among the used slots; a forward over scattered
slots copies every row's keys and values out of the slab in every layer, where a contiguous
range is read in place. ``compact`` moves the highest rows down into the holes (one copy of a
row's cached tokens, once, against a copy of every row in every round), so a batch's slots
stay 0..n-1 (``docs/bench/slot_layout_cost.py``).
"""

from __future__ import annotations

from typing import TypeVar

import torch

K = TypeVar("K")


class KVCacheFull(RuntimeError):
    """No free slot."""


class KVCache:
    def __init__(self, num_layers: int, slots: int, max_context: int, kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: str | torch.device) -> None:
        shape = (num_layers, slots, kv_heads, max_context, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.slots = slots
        self.max_context = max_context
        self.lengths = [0] * slots
        self._free = list(range(slots - 1, -1, -1))  # pop() hands out the lowest slot first
        self._used: set[int] = set()

    # -- slots ---------------------------------------------------------------------------
    def allocate(self) -> int:
        if not self._free:
            raise KVCacheFull("no free KV slot")
        slot = self._free.pop()
        self._used.add(slot)
        self.lengths[slot] = 0
        return slot

    def release(self, slot: int) -> None:
        """Free a slot at once (finish or cancellation). Idempotent."""
        if slot in self._used:
            self._used.remove(slot)
            self.lengths[slot] = 0
            self._free.append(slot)
            self._free.sort(reverse=True)  # keep handing out low slots: batches stay contiguous

    def truncate(self, slot: int, length: int) -> None:
        """Roll back to ``length`` committed tokens (rejected drafts are dropped)."""
        if not 0 <= length <= self.lengths[slot]:
            raise ValueError(f"cannot truncate slot {slot} from {self.lengths[slot]} to {length}")
        self.lengths[slot] = length

    def compact(self) -> dict[int, int]:
        """Move the highest used slots into the lowest free ones until the used slots are
        0..n-1; return ``{old slot: new slot}`` for the owners of the moved rows. (A moved row
        lands below every slot still free, so no row moves twice.)"""
        moves: dict[int, int] = {}
        while self._used and self._free and max(self._used) > self._free[-1]:
            src, dst = max(self._used), self._free.pop()
            n = self.lengths[src]
            self.k[:, dst, :, :n] = self.k[:, src, :, :n]
            self.v[:, dst, :, :n] = self.v[:, src, :, :n]
            self.release(src)  # first: used_tokens, read from other threads, never counts it twice
            self._used.add(dst)
            self.lengths[dst] = n
            moves[src] = dst
        return moves

    def compact_keyed(self, slots: dict[K, int]) -> None:
        """``compact``, for an owner that keeps its rows' slots in ``slots`` (updated)."""
        moves = self.compact()
        if moves:
            for key, slot in slots.items():
                slots[key] = moves.get(slot, slot)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    # -- accounting ----------------------------------------------------------------------
    @property
    def used_tokens(self) -> int:
        return sum(self.lengths[s] for s in tuple(self._used))  # stats() reads from other threads

    @property
    def capacity_tokens(self) -> int:
        return self.slots * self.max_context

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def usage(self) -> float:
        return self.used_tokens / self.capacity_tokens
