"""Shared fixtures. The model is loaded once per test session."""

from __future__ import annotations

import pytest

# Real local Kubernetes cluster and Prometheus fixtures (see that module's docstring).
pytest_plugins = ["specd.cluster.pytest_plugin"]


@pytest.fixture(scope="session")
def target():
    """The embedded SmolLM2-135M-Instruct, loaded once (CPU float32 here)."""
    from specd.worker.model import load_model

    return load_model("smollm2-135m")


@pytest.fixture(scope="session")
def chat_prompt_ids(target):
    def encode(text: str) -> list[int]:
        ids = target.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if not isinstance(ids, list):
            ids = ids["input_ids"]
        return list(ids)

    return encode
