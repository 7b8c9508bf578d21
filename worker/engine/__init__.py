"""The specd engine: draft -> schedule -> verify -> commit over a continuously batched set of
requests. ``api`` holds the in-process types; ``engine.Engine`` is the facade."""

from specd.worker.engine.api import (
    DRAFTERS,
    EngineConfig,
    EngineError,
    EngineStats,
    GenerationRequest,
    RequestOutput,
    SamplingParams,
    SpecStats,
    StreamEvent,
)

__all__ = ["DRAFTERS", "Engine", "EngineConfig", "EngineError", "EngineStats",
           "GenerationRequest", "RequestOutput", "SamplingParams", "SpecStats", "StreamEvent"]


def __getattr__(name: str):  # lazy: importing the API types must not import torch
    if name == "Engine":
        from specd.worker.engine.engine import Engine

        return Engine
    raise AttributeError(name)
