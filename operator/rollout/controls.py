"""The six human actions on a rollout, each one JSON merge patch on the SpeculativeService.

Written once, used by ``kubectl specd``, the dashboard and the tests; plain ``kubectl patch
--type merge -p '<the same JSON>'`` does exactly the same. Actions that must act once carry
a fresh id (promote, promote full, resume, retry): the operator remembers the last id it
acted on in ``status.rollout``, so a repeated or stale patch is a no-op. Pause and abort are
levels (``paused: true`` holds until resumed; ``abort: true`` until retried). Every patch
also records who acted and what, in annotations the operator copies into the history.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any, Literal

from specd.api import k8s

Action = Literal["promote", "promote-full", "pause", "resume", "abort", "retry"]
ACTIONS: tuple[Action, ...] = ("promote", "promote-full", "pause", "resume", "abort", "retry")
ACTOR_ANNOTATION = f"{k8s.GROUP}/last-action-by"
ACTION_ANNOTATION = f"{k8s.GROUP}/last-action"
MERGE = "application/merge-patch+json"


def new_id() -> str:
    """A request id: sortable by time, unique across clients."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:6]}"


def patch(action: Action, actor: str, request_id: str | None = None) -> dict[str, Any]:
    """The merge patch for ``action`` taken by ``actor``."""
    rid = request_id or new_id()
    rollout: dict[str, Any]
    if action == "promote":
        rollout = {"promote": {"id": rid, "full": False}}
    elif action == "promote-full":
        rollout = {"promote": {"id": rid, "full": True}}
    elif action == "pause":
        rollout = {"paused": True}
    elif action == "resume":
        rollout = {"paused": False, "resume": rid}
    elif action == "abort":
        rollout = {"abort": True}
    elif action == "retry":
        rollout = {"abort": False, "paused": False, "retry": rid}
    else:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    return {"metadata": {"annotations": {ACTOR_ANNOTATION: actor,
                                         ACTION_ANNOTATION: f"{action} {rid}"}},
            "spec": {"rollout": rollout}}


# Which controls make sense in which rollout phase (as the Argo Rollouts dashboard enables
# them): promote and abort while a canary runs, pause while it progresses, resume once
# paused, retry after a rollback or an abort.
BY_PHASE: dict[str, tuple[Action, ...]] = {
    "Progressing": ("promote", "promote-full", "pause", "abort"),
    "Paused": ("promote", "promote-full", "resume", "abort"),
    "Promoting": ("abort",),
    "RolledBack": ("retry",),
    "Healthy": (),
}


def available(obj: Mapping[str, Any]) -> tuple[Action, ...]:
    """The controls that act on ``obj`` in its rollout's present state (none for a service
    that does not roll out as a canary)."""
    spec_rollout = (obj.get("spec") or {}).get("rollout") or {}
    if spec_rollout.get("strategy") != "Canary":
        return ()
    rollout = (obj.get("status") or {}).get("rollout") or {}
    if rollout.get("aborted") or spec_rollout.get("abort"):
        return ("retry",)
    return BY_PHASE.get(rollout.get("phase", "Healthy"), ())


def apply(custom_api: Any, namespace: str, name: str, action: Action, actor: str,
          field_manager: str = "specd-controls", request_id: str | None = None) -> dict:
    """Send the patch (thin edge over ``kubernetes.client.CustomObjectsApi``)."""
    return custom_api.patch_namespaced_custom_object(
        k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, name,
        patch(action, actor, request_id), field_manager=field_manager, _content_type=MERGE)
