"""``specd serve`` wiring: load the model, build the engine and app, run uvicorn.

Shutdown: on SIGTERM the worker stops admitting (``/readyz`` turns 503, new requests on open
connections get 503, the listening socket closes), lets in-flight requests finish within the
grace period (uvicorn's graceful shutdown), drains the engine, and exits 0. Plain uvicorn
re-raises the signal after a graceful shutdown (exit status 143); a pod's orderly stop is not
a failure, so this server does not.
"""

from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from specd import SpecdError
from specd.worker.server.app import ServerSettings, create_app

log = logging.getLogger("specd.worker.server")


class DrainingServer(uvicorn.Server):
    """uvicorn, but SIGTERM marks the app as draining first and the exit status stays 0."""

    def __init__(self, config: uvicorn.Config, app_server: Any) -> None:
        super().__init__(config)
        self.app_server = app_server

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.app_server.admission.draining:
            log.info("signal %s: stop admitting, draining in-flight requests (grace %.0fs)",
                     signal.Signals(sig).name, self.config.timeout_graceful_shutdown or 0)
        self.app_server.admission.draining = True
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM:  # an orderly stop: do not re-raise it after shutdown
            self._captured_signals = [s for s in self._captured_signals if s != signal.SIGTERM]


def build(args: argparse.Namespace) -> tuple[Any, ServerSettings]:
    """Load everything ``serve`` needs; a bad flag or file is a SpecdError (one line)."""
    from prometheus_client import CollectorRegistry

    from specd.api.policy import Policy
    from specd.worker.server.policy_watch import read_policy_file

    if args.max_queue < 0:
        raise SpecdError("--max-queue must be >= 0")
    if not 1 <= args.port <= 65535:
        raise SpecdError("--port must be in 1..65535")
    if args.grace_period < 0:
        raise SpecdError("--grace-period must be >= 0")
    policy_text: str | None = None
    policy = Policy()
    if args.policy_file:
        policy = read_policy_file(args.policy_file)
        policy_text = Path(args.policy_file).read_text()
    from specd.worker.engine import Engine, EngineConfig  # heavy: after the cheap checks
    from specd.worker.engine.threads import serial_main_thread
    from specd.worker.model import load_model

    # the event loop's thread stays serial; the engine's round thread runs the tensor work
    threads = serial_main_thread()
    config = EngineConfig(drafter=args.drafter, drafter_path=args.drafter_path,
                          prompt_lookup=args.prompt_lookup, max_slots=args.max_slots, max_context=args.max_context,
                          cost_profile=args.cost_profile, seed=args.seed, threads=threads)
    loaded = load_model(args.model, args.device, args.dtype)
    registry = CollectorRegistry()
    engine = Engine(loaded, config, policy=policy, registry=registry)
    name = args.served_model_name or args.model
    settings = ServerSettings(
        model_name=name, aliases=(args.model,) if name != args.model else (),
        max_context=usable_context(engine, args.max_context),
        capacity=args.max_slots + args.max_queue, revision=args.revision, track=args.track,
        policy_file=args.policy_file, policy_initial_text=policy_text,
        policy_poll_s=args.policy_poll_interval, grace_period_s=args.grace_period)
    app = create_app(engine, loaded.tokenizer, settings, registry)
    return app, settings


def usable_context(engine: Any, max_context: int) -> int:
    """The engine's per-request limit (prompt + output), when it says so; else the flag."""
    for attr in ("max_request_tokens", "usable_context"):
        value = getattr(engine, attr, None)
        if isinstance(value, int) and value > 0:
            return min(value, max_context)
    return max_context


def serve(args: argparse.Namespace) -> int:
    app, settings = build(args)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="info",
                            access_log=str(args.log_requests) == "1",
                            timeout_graceful_shutdown=int(max(1, settings.grace_period_s)),
                            lifespan="on")
    server = DrainingServer(config, app.state.server)
    server.run()
    if not server.started:
        raise SpecdError(f"could not serve on {args.host}:{args.port} (see the log above)")
    return 0
