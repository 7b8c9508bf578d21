"""The engine's matmul for few-row inputs on CPU.

A decode or verify step multiplies a handful of token rows (M = 1..16) by every weight matrix.
``F.linear(x, W)`` on this CPU build goes through a kernel that is slow for small M: on the
2-core dev machine a whole SmolLM2-135M forward took 35 ms for 1 token and 54 ms for 4-5,
while computing the same product as ``W @ x.T`` (the weight as the left operand, the tokens as
a transposed right operand) took 19 ms and 20-27 ms; a single row is duplicated to two rows
first, because the one-row path (a matrix-vector product) is the slow one again. Beyond a few
rows both routes are alike and ``F.linear`` wins at prefill sizes, so it stays there, on
CUDA (cuBLAS picks its own kernel) and in bfloat16, where ``F.linear`` reaches the CPU's
bf16 instructions and the weight-first route does not (same machine, the matmuls of a forward, 1 /
4 / 16 rows: 7.4 / 11.5 / 15.4 ms against 21.2 / 21.5 / 23.2 ms).

    python -m specd.worker.engine.kernels [--dtype bfloat16]   # both routes, per row count
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# largest row count that takes the weight-first route on CPU (measured: faster up to ~16 rows,
# slower at 64+)
SMALL_ROWS = 16

MatMul = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` with the faster small-M route on CPU; same values up to float rounding.
    Leading dimensions count as rows (``[B, k, H]`` with B * k <= SMALL_ROWS goes the fast way)."""
    rows = x.numel() // x.shape[-1] if x.dim() >= 2 and x.shape[-1] else 0
    if x.device.type != "cpu" or x.dtype != torch.float32 or not 1 <= rows <= SMALL_ROWS:
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, x.shape[-1]).contiguous()
    if rows == 1:
        y = torch.matmul(weight, torch.cat([flat, flat]).T).T[:1]
    else:
        y = torch.matmul(weight, flat.T).T
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same state-dict keys) whose forward uses ``linear``:
    the drafters' small per-round matmuls take the fast route too."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def _main() -> None:
    import argparse
    import time

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=30, help="SmolLM2-135M-shaped layers to stack")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(getattr(torch, args.dtype))
    gen = torch.Generator().manual_seed(0)
    # SmolLM2-135M shapes: fused qkv 960x576, o 576x576, fused gate/up 3072x576, down 576x1536;
    # weights streamed from memory like a real forward (30 layers ~ 420 MB, past any cache)
    shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
    stack = [[torch.randn(o, i, generator=gen) / i ** 0.5 for o, i in shapes]
             for _ in range(args.layers)]
    head = torch.randn(49152, 576, generator=gen) / 24

    def forward(x: torch.Tensor, mm: MatMul) -> torch.Tensor:
        for w_qkv, w_o, w_gu, w_down in stack:
            q = mm(x, w_qkv)
            x = x + mm(q[:, :576], w_o)
            gu = mm(x, w_gu)
            x = x + mm(F.silu(gu[:, :1536]) * gu[:, 1536:], w_down)
        return mm(x, head)

    def best_ms(x: torch.Tensor, mm: MatMul) -> float:
        forward(x, mm)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            forward(x, mm)
            times.append(time.perf_counter() - t0)
        return min(times) * 1e3

    print(f"{'rows':>5} {'F.linear ms':>12} {'specd ms':>9} {'speed-up':>9}")
    for rows in (1, 2, 4, 5, 8, 16, 32, 64):
        x = torch.randn(rows, 576, generator=gen)
        a, b = best_ms(x, F.linear), best_ms(x, linear)
        print(f"{rows:5d} {a:12.1f} {b:9.1f} {a / b:9.2f}x", flush=True)


if __name__ == "__main__":
    _main()
