"""Model copies for tests and the demo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def perturbed_copy(target: Any, directory: Path, scale: float = 0.05) -> Path:
    """The embedded model (a loaded ``specd.worker.model.LoadedModel``) with every weight
    matrix of its decoder layers perturbed (a "changed target": another fine-tune, a broken
    quantisation), saved as safetensors with its config and tokenizer (transformers will not
    re-save a GGUF-loaded model itself)."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(0)
    state = {}
    for key, value in target.model.state_dict().items():
        value = value.detach().clone().contiguous()
        if ".layers." in key and value.dim() == 2:
            value.mul_(1 + scale * torch.randn(value.shape, generator=generator))
        state[key] = value
    directory.mkdir(parents=True)
    config = target.model.config.to_dict()
    config.pop("quantization_config", None)  # the copy is plain float32 safetensors
    (directory / "config.json").write_text(json.dumps(config))
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    target.tokenizer.save_pretrained(directory)
    return directory
