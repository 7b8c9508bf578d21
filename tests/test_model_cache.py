"""The converted-checkpoint cache (``worker/model_cache.py``): a GGUF file converted once loads
from the cache as the very same model and tokenizer, and a cache that is missing, stale or
unwritable only ever means reading the GGUF file again."""

from __future__ import annotations

import json
import logging

import pytest
import torch

TEXTS = ["Write a haiku about the sea.", "def fib(n):\n    return", "请用一句话解释什么是机器学习。",
         "Count from 1 to 30: 1, 2, 3"]


def _no_gguf_reads(monkeypatch) -> None:
    """Any read of a GGUF file from here on fails loudly."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    def refuse(*args, **kwargs):
        raise AssertionError("the GGUF file was read")

    monkeypatch.setattr(gguf_utils, "load_gguf_checkpoint", refuse)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The embedded model loaded from its GGUF file (writing the conversion to an empty
    cache), then loaded again with that cache in place; and the cache folder."""
    from specd.worker.model import load_model

    root = tmp_path_factory.mktemp("model-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECD_MODEL_CACHE", str(root))
        from_gguf = load_model("smollm2-135m", "cpu", "float32")
        _no_gguf_reads(patch)
        from_cache = load_model("smollm2-135m", "cpu", "float32")
    return from_gguf, from_cache, root


@pytest.mark.model
def test_the_spy_sees_a_gguf_read(monkeypatch):
    from specd.worker.model import load_tokenizer

    monkeypatch.setenv("SPECD_MODEL_CACHE", "none")
    _no_gguf_reads(monkeypatch)
    with pytest.raises(AssertionError, match="GGUF file was read"):
        load_tokenizer("smollm2-135m")


@pytest.mark.model
def test_a_cached_conversion_is_the_same_model_and_tokenizer(both):
    from_gguf, from_cache, root = both
    (folder,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    assert (folder / "specd-converted.json").exists() and (folder / "model.safetensors").exists()
    assert not [p for p in root.iterdir() if p.name.startswith(".converting-")]

    assert from_cache.fingerprint == from_gguf.fingerprint
    ours, theirs = from_cache.model.state_dict(), from_gguf.model.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)
    # the same config, less where it was read from and the GGUF quantizer's entry
    where = ("_name_or_path", "quantization_config")
    assert {k: v for k, v in from_cache.model.config.to_dict().items() if k not in where} == \
        {k: v for k, v in from_gguf.model.config.to_dict().items() if k not in where}
    assert (from_cache.model.generation_config.eos_token_id
            == from_gguf.model.generation_config.eos_token_id)

    a, b = from_gguf.tokenizer, from_cache.tokenizer
    assert (a.eos_token_id, a.bos_token_id, a.pad_token_id, len(a)) == \
        (b.eos_token_id, b.bos_token_id, b.pad_token_id, len(b))
    for text in TEXTS:
        assert a.encode(text) == b.encode(text)
        chat = [{"role": "user", "content": text}]
        assert a.apply_chat_template(chat, add_generation_prompt=True, tokenize=False) == \
            b.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)

    ids = torch.tensor([a.encode(TEXTS[0])])
    with torch.no_grad():
        assert torch.equal(from_gguf.model(ids).logits, from_cache.model(ids).logits)


@pytest.mark.model
def test_a_conversion_with_other_weights_is_ignored(both, caplog):
    from specd.worker.model import _load_converted, resolve_model

    _, _, root = both
    (folder,) = [p for p in root.iterdir() if not p.name.startswith(".")]
    marker = folder / "specd-converted.json"
    saved = marker.read_text()
    try:
        marker.write_text(json.dumps({**json.loads(saved), "fingerprint": "0" * 16}))
        with pytest.MonkeyPatch.context() as patch, caplog.at_level(logging.WARNING):
            patch.setenv("SPECD_MODEL_CACHE", str(root))
            assert _load_converted(resolve_model("smollm2-135m"), torch.float32) is None
        assert "not the GGUF file's" in caplog.text
    finally:
        marker.write_text(saved)


def test_an_unwritable_cache_changes_nothing_but_a_warning(tmp_path, monkeypatch, caplog):
    from specd.worker import model_cache

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("SPECD_MODEL_CACHE", str(blocked / "models"))
    with caplog.at_level(logging.WARNING):
        # the model and tokenizer are never touched: the folder fails first
        assert model_cache.save(gguf, object(), object(), "f") is None
    assert "cannot cache the converted m.gguf" in caplog.text
    assert model_cache.find(gguf) is None


def test_a_new_conversion_of_a_file_replaces_the_old_one(tmp_path, monkeypatch):
    """Written through ``save`` with the checkpoint writer replaced by one that writes only a
    stand-in tokenizer: the keys, rename and pruning around it are what is tested (the real
    writer: the tests above, against a GGUF load)."""
    from specd.worker import model_cache

    class Written:
        def save_pretrained(self, folder):
            (folder / "tokenizer.json").write_text("{}")

    monkeypatch.setattr(model_cache, "write_plain_checkpoint", lambda model, tokenizer, folder:
                        tokenizer.save_pretrained(folder))
    monkeypatch.setenv("SPECD_MODEL_CACHE", str(tmp_path / "cache"))
    gguf, other = tmp_path / "m.gguf", tmp_path / "other.gguf"
    gguf.write_bytes(b"GGUF one")
    other.write_bytes(b"GGUF other")
    old = model_cache.save(gguf, None, Written(), "f1")
    kept = model_cache.save(other, None, Written(), "f9")
    assert old and model_cache.find(gguf) == (old, "f1")
    gguf.write_bytes(b"GGUF two, longer")  # the file changed: a new conversion
    new = model_cache.save(gguf, None, Written(), "f2")
    assert new != old and model_cache.find(gguf) == (new, "f2")
    assert not old.exists() and kept and kept.exists()  # another file's stays
    assert model_cache.save(gguf, None, Written(), "f3") == new  # already there: kept as is
    assert model_cache.find(gguf) == (new, "f2")


def test_the_cache_is_keyed_by_the_file_and_can_be_turned_off(tmp_path, monkeypatch):
    from specd.worker import model_cache

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF one")
    first = model_cache.conversion_key(gguf)
    gguf.write_bytes(b"GGUF two, longer")  # a changed file is another conversion
    assert model_cache.conversion_key(gguf) != first
    for off in ("none", "off", ""):
        monkeypatch.setenv("SPECD_MODEL_CACHE", off)
        assert model_cache.cache_root() is None and model_cache.find(gguf) is None
    monkeypatch.delenv("SPECD_MODEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_cache.cache_root() == tmp_path / "xdg" / "specd" / "models"
