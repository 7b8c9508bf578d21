"""A GGUF checkpoint converted once, kept as a plain Hugging Face folder.

transformers reads a GGUF file's metadata three times per load (tokenizer, config, weights),
in Python, field by field: for the embedded SmolLM2-135M that is most of a worker's start-up,
while the weights themselves dequantise in a second or two. The first load writes what it
built (float32 safetensors, config, tokenizer) to a cache folder; every later load of the
same file reads that instead. A pod starts faster, and so does every rollout step that waits
for one.

The key is the GGUF file itself (path, size, modification time) and the transformers version
that converted it; a conversion is used only if its marker file is there (written last) and
the weights it loads carry the fingerprint the GGUF load recorded. Anything else (no cache
folder, a read-only one, a half-written one) falls back to the GGUF file: the cache can
make a load faster, never different.

Where: ``$SPECD_MODEL_CACHE`` (``none`` turns it off), else ``$XDG_CACHE_HOME/specd/models``,
else ``~/.cache/specd/models``. The worker image converts the embedded model at build time
into a read-only folder it names in ``SPECD_MODEL_CACHE``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CACHE_ENV = "SPECD_MODEL_CACHE"
MARKER = "specd-converted.json"
FORMAT = 1  # bump when what is written changes


def cache_root() -> Path | None:
    """The folder conversions live in, or None when the cache is turned off."""
    configured = os.environ.get(CACHE_ENV)
    if configured is not None:
        return None if configured.strip().lower() in ("", "none", "off") else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specd" / "models"


def conversion_key(gguf_path: Path) -> str:
    """What a conversion is valid for: this file as it is now, converted by this transformers."""
    import transformers

    stat = gguf_path.stat()
    text = (f"{gguf_path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:"
            f"{transformers.__version__}:{FORMAT}")
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def find(gguf_path: Path) -> tuple[Path, str] | None:
    """A finished conversion of ``gguf_path``: its folder and the weights' fingerprint."""
    root = cache_root()
    if root is None:
        return None
    folder = root / conversion_key(gguf_path)
    try:
        marker = json.loads((folder / MARKER).read_text())
        return folder, str(marker["fingerprint"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(gguf_path: Path, model: Any, tokenizer: Any, fingerprint: str) -> Path | None:
    """Write a conversion (best effort: a failure is logged and changes nothing). Written to
    a temporary folder and renamed into place, so a reader never sees half of one and two
    workers converting at once leave one."""
    root = cache_root()
    if root is None:
        return None
    folder = root / conversion_key(gguf_path)
    if (folder / MARKER).exists():
        return folder
    tmp: Path | None = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".converting-", dir=root))
        tmp.chmod(0o755)  # readable by the serving user where the image build converted it
        write_plain_checkpoint(model, tokenizer, tmp)
        (tmp / MARKER).write_text(json.dumps({"gguf": str(gguf_path.resolve()),
                                              "fingerprint": fingerprint, "format": FORMAT}))
        os.replace(tmp, folder)  # fails if another worker got there first: theirs stays
        tmp = None
        log.info("converted %s once, into %s", gguf_path.name, folder)
        _drop_older(root, gguf_path, keep=folder)
        return folder
    except OSError as exc:
        if (folder / MARKER).exists():  # another worker's conversion won the rename
            return folder
        log.warning("cannot cache the converted %s in %s (%s); loads keep reading the GGUF "
                    "file", gguf_path.name, root, exc)
        return None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _drop_older(root: Path, gguf_path: Path, keep: Path) -> None:
    """Remove conversions of the same file made before it changed (or by another transformers):
    no key will name them again."""
    source = str(gguf_path.resolve())
    for other in root.iterdir():
        if other == keep or other.name.startswith("."):
            continue
        try:
            same = json.loads((other / MARKER).read_text()).get("gguf") == source
        except (OSError, ValueError, AttributeError):
            continue
        if same:
            shutil.rmtree(other, ignore_errors=True)


def write_plain_checkpoint(model: Any, tokenizer: Any, folder: Path,
                           state: dict[str, Any] | None = None) -> None:
    """A model (with ``state`` in place of its own weights, when given) as an ordinary
    checkpoint folder: transformers' ``save_pretrained`` refuses a model that came from GGUF
    (its quantizer stays attached), so the pieces are written directly, the config without
    the GGUF quantization entry."""
    import copy

    from safetensors.torch import save_file, save_model

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    if state is None:
        # save_model writes a tied tensor (embeddings and lm_head) once; loading re-ties it
        save_model(model, str(folder / "model.safetensors"), metadata={"format": "pt"})
    else:
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(folder)
