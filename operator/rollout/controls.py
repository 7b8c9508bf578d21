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


def apply(custom_api: Any, namespace: str, name: str, action: Action, actor: str,
          field_manager: str = "specd-controls", request_id: str | None = None) -> dict:
    """Send the patch (thin edge over ``kubernetes.client.CustomObjectsApi``)."""
    return custom_api.patch_namespaced_custom_object(
        k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, name,
        patch(action, actor, request_id), field_manager=field_manager, _content_type=MERGE)
