"""Model copies for tests and the demo."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def perturbed_copy(target: Any, directory: Path, scale: float = 0.05) -> Path:
    """The embedded model (a loaded ``specd.worker.model.LoadedModel``) with every weight
    matrix of its decoder layers perturbed (a "changed target": another fine-tune, a broken
    quantisation), saved as float32 safetensors with its config and tokenizer."""
    import torch

    from specd.worker.model_cache import write_plain_checkpoint

    generator = torch.Generator().manual_seed(0)
    state = {}
    for key, value in target.model.state_dict().items():
        value = value.detach().clone().contiguous()
        if ".layers." in key and value.dim() == 2:
            value.mul_(1 + scale * torch.randn(value.shape, generator=generator))
        state[key] = value
    directory.mkdir(parents=True)
    write_plain_checkpoint(target.model, target.tokenizer, directory, state)
    return directory
