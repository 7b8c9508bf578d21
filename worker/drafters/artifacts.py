"""Drafter artifacts: a folder with ``drafter.safetensors`` (the drafter's own weights, fp16)
and ``metadata.json`` (format, method, config, target fingerprint, K, data hash, training
settings, evaluation figures, the reproducing command).

Target weights (embedding, LM head) are never stored: ``load_drafter`` binds the net to the
loaded target after checking the target's fingerprint, and refuses a mismatched target.

Short names: ``parallel``, ``semi-ar`` and ``draft-model`` resolve to the committed artifacts
``worker/artifacts/<target alias>/<name>/`` (``$SPECD_ARTIFACTS_DIR`` overrides the root), so
``load_drafter("semi-ar", load_model("smollm2-135m"))`` is all the engine needs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specd import SpecdError
from specd.worker.engine.api import TRAINED_DRAFTERS

if TYPE_CHECKING:
    from specd.worker.drafters.nets import _BoundHead
    from specd.worker.model import LoadedModel

FORMAT = "specd-drafter/1"
WEIGHTS_FILE = "drafter.safetensors"
METADATA_FILE = "metadata.json"
SHORT_NAMES = TRAINED_DRAFTERS


class DrafterArtifactError(SpecdError):
    """A drafter artifact is missing, malformed, or made for another target."""


def artifacts_root() -> Path:
    """Where committed artifacts live (worker/artifacts, or $SPECD_ARTIFACTS_DIR)."""
    env = os.environ.get("SPECD_ARTIFACTS_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "artifacts"


def target_alias(target: LoadedModel) -> str:
    """The folder name artifacts for this target are kept under (its model reference)."""
    return Path(target.source.reference).name.removesuffix(".gguf")


def resolve_artifact(name_or_path: str | os.PathLike[str], target: LoadedModel) -> Path:
    """A short name (``semi-ar``) or a folder path -> the artifact folder; raise if absent."""
    text = str(name_or_path)
    if text in SHORT_NAMES:
        path = artifacts_root() / target_alias(target) / text
    else:
        path = Path(text).expanduser()
    if not (path / METADATA_FILE).is_file() or not (path / WEIGHTS_FILE).is_file():
        hint = f" (short names: {', '.join(SHORT_NAMES)})" if text not in SHORT_NAMES else ""
        raise DrafterArtifactError(
            f"no drafter artifact at {path}: expected {WEIGHTS_FILE} and {METADATA_FILE}{hint}")
    return path


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    meta_path = Path(path) / METADATA_FILE
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DrafterArtifactError(f"cannot read {meta_path}: {exc}") from exc
    if meta.get("format") != FORMAT:
        raise DrafterArtifactError(
            f"{meta_path}: format {meta.get('format')!r} is not {FORMAT!r}")
    return meta


def save_drafter(net: _BoundHead, path: str | os.PathLike[str], method: str,
                 fingerprint: str, target_reference: str,
                 extra: dict[str, Any] | None = None, dtype: str = "float16") -> Path:
    """Write the net's own weights (cast to ``dtype``) and metadata to folder ``path``."""
    import torch
    from safetensors.torch import save_file

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    cast = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    tensors = {}
    for key, value in net.state_dict().items():
        value = value.detach().to("cpu")
        if value.is_floating_point() and not key.startswith("calib_"):
            value = value.to(cast)
        tensors[key] = value.contiguous()
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": FORMAT, "method": method})
    meta = {"format": FORMAT, "method": method, "config": net.config,
            "num_positions": net.num_positions, "weights_dtype": dtype,
            "target": {"reference": target_reference, "fingerprint": fingerprint}}
    meta.update(extra or {})
    (out / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return out


def update_metadata(path: str | os.PathLike[str], updates: dict[str, Any]) -> dict[str, Any]:
    """Merge ``updates`` into an artifact's metadata.json (e.g. evaluation figures)."""
    meta = read_metadata(path)
    meta.update(updates)
    (Path(path) / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def check_target(meta: dict[str, Any], target: LoadedModel, where: str = "") -> None:
    """Raise DrafterArtifactError unless the artifact was made for this target's weights."""
    from specd.worker.model import model_fingerprint

    want = meta.get("target", {}).get("fingerprint")
    have = model_fingerprint(target)
    if want != have:
        raise DrafterArtifactError(
            f"drafter {where or meta.get('method')} was trained for target "
            f"{meta.get('target', {}).get('reference')!r} (fingerprint {want}), but the loaded "
            f"target {target.source.reference!r} has fingerprint {have}: retrain it with "
            "'specd train'")


def load_drafter(name_or_path: str | os.PathLike[str], target: LoadedModel,
                 check: bool = True) -> _BoundHead:
    """Load an artifact, check it matches ``target``, and return the net bound to it.

    The net is in eval mode on the target's device and dtype; its metadata dict is on
    ``net.metadata`` and its method on ``net.method``.
    """
    from safetensors.torch import load_file

    from specd.worker.drafters.nets import build_net

    path = resolve_artifact(name_or_path, target)
    meta = read_metadata(path)
    if check:
        check_target(meta, target, str(path))
    try:
        net = build_net(meta["method"], meta["config"])
        state = load_file(str(path / WEIGHTS_FILE))
        net.load_state_dict({k: v.float() if v.is_floating_point() else v
                             for k, v in state.items()})
    except (KeyError, RuntimeError, ValueError) as exc:
        raise DrafterArtifactError(f"drafter artifact {path} is malformed: {exc}") from exc
    net.bind(target)
    net.eval()
    net.requires_grad_(False)
    net.metadata = meta
    net.method = meta["method"]
    return net
