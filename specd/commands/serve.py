"""``specd serve``: the engine behind an OpenAI-compatible HTTP API (one worker pod).

Every flag can also be set by an environment variable (shown in ``--help``); a flag given on
the command line wins over the variable.
"""

from __future__ import annotations

import argparse
import os

HELP = "serve the engine over an OpenAI-compatible HTTP API (/v1/completions, /metrics, ...)"


def _env(name: str, default: object) -> object:
    return os.environ.get(name, default)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # here, not at module level: `specd --help` and `specd operator` never load the worker
    from specd.worker.engine.api import DRAFTERS as DRAFTER_CHOICES

    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
    parser.epilog = ("Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, "
                     "GET /healthz, GET /readyz, GET /metrics. SIGTERM stops admitting, drains "
                     "in-flight requests within --grace-period and exits 0. The policy file is "
                     "re-read when it changes (ConfigMap symlink swaps included); an invalid "
                     "document is refused and the old policy stays.")

    def add(flag: str, env: str, default: object, help: str, **kw: object) -> None:
        parser.add_argument(flag, default=_env(env, default), help=f"{help} [env {env}]", **kw)

    add("--model", "SPECD_MODEL", "smollm2-135m",
        "model reference: embedded alias, local dir, .gguf path or hub id")
    add("--served-model-name", "SPECD_SERVED_MODEL_NAME", None,
        "the model id clients send and /v1/models lists (default: --model)")
    add("--drafter", "SPECD_DRAFTER", "ngram", "drafter: " + ", ".join(DRAFTER_CHOICES),
        choices=DRAFTER_CHOICES)
    add("--drafter-path", "SPECD_DRAFTER_PATH", None,
        "trained drafter artifact (default: the packaged one for the drafter)")
    parser.add_argument("--prompt-lookup", action="store_true",
                        default=os.environ.get("SPECD_PROMPT_LOOKUP", "").lower()
                        in ("1", "true", "yes"),
                        help="prompt lookup beside the trained drafter, per request and round "
                             "the better proposal [env SPECD_PROMPT_LOOKUP=1]")
    add("--policy-file", "SPECD_POLICY_FILE", None,
        "verification policy JSON (the mounted ConfigMap file); hot-reloaded")
    add("--policy-poll-interval", "SPECD_POLICY_POLL_INTERVAL", 1.0,
        "seconds between policy file checks", type=float)
    add("--host", "SPECD_HOST", "127.0.0.1", "address to listen on (0.0.0.0 in a pod)")
    add("--port", "SPECD_PORT", 8000, "port to listen on", type=int)
    add("--max-slots", "SPECD_MAX_SLOTS", 32, "requests decoding at once (KV slots)", type=int)
    add("--max-queue", "SPECD_MAX_QUEUE", 64,
        "requests waiting for a slot before new ones get 429", type=int)
    add("--max-context", "SPECD_MAX_CONTEXT", 2048,
        "tokens per request (prompt + max_tokens)", type=int)
    add("--device", "SPECD_DEVICE", "auto", "auto, cpu or cuda[:N]")
    add("--dtype", "SPECD_DTYPE", "auto", "auto, float32, bfloat16 or float16")
    add("--cost-profile", "SPECD_COST_PROFILE", "measure",
        "measure the target's step cost at start-up, or none (cost = token count)",
        choices=("measure", "none"))
    add("--seed", "SPECD_SEED", 0, "engine RNG seed (requests may pass their own)", type=int)
    add("--revision", "SPECD_REVISION", "dev", "revision label on metrics (set by the operator)")
    add("--track", "SPECD_TRACK", "stable", "track label on metrics: stable or canary",
        choices=("stable", "canary"))
    add("--grace-period", "SPECD_GRACE_PERIOD", 30.0,
        "seconds to drain in-flight requests after SIGTERM", type=float)
    add("--log-requests", "SPECD_LOG_REQUESTS", "0", "1: log every HTTP request (access log)")


def run(args: argparse.Namespace) -> int:
    from specd.worker.server.main import serve

    return serve(args)
