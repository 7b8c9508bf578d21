"""The CPU small-row matmul route gives F.linear's values for every row count and shape."""

import pytest
import torch
import torch.nn.functional as F

from specd.worker.engine.kernels import SMALL_ROWS, linear


@pytest.mark.parametrize("rows", [1, 2, 5, SMALL_ROWS, SMALL_ROWS + 1, 40])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_matches_f_linear(rows: int, with_bias: bool) -> None:
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 64, generator=gen)
    w = torch.randn(96, 64, generator=gen)
    b = torch.randn(96, generator=gen) if with_bias else None
    got = linear(x, w, b)
    assert got.shape == (rows, 96)
    torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-4)


def test_linear_accepts_non_contiguous_and_batched_inputs() -> None:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(32, 48, generator=gen)
    wide = torch.randn(3, 96, generator=gen)
    x = wide[:, ::2]  # strided view, 3 rows
    torch.testing.assert_close(linear(x, w), F.linear(x, w), rtol=1e-5, atol=1e-4)
    for shape in [(2, 4, 48), (1, 1, 48), (5, 4, 48)]:  # [B, k, H]: B * k rows
        x3 = torch.randn(*shape, generator=gen)
        torch.testing.assert_close(linear(x3, w), F.linear(x3, w), rtol=1e-5, atol=1e-4)
