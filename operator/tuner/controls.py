"""The human actions on the tuner: pin or unpin one task group, one JSON merge patch.

Shared by ``kubectl specd policy``, the dashboard and the tests. ``spec.tuning.pinnedGroups``
is a list (a merge patch replaces it whole), so the patch carries the object's
resourceVersion: a concurrent edit makes the API refuse it (409) rather than lose a pin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specd.api import k8s
from specd.api.metrics import TASK_GROUPS
from specd.operator.rollout.controls import ACTION_ANNOTATION, ACTOR_ANNOTATION, MERGE, new_id


def pin_patch(obj: Mapping[str, Any], group: str, pin: bool, actor: str) -> dict[str, Any]:
    """The patch pinning (``pin``) or unpinning ``group`` on ``obj`` as read now."""
    if group not in TASK_GROUPS:
        raise ValueError(f"unknown task group {group!r}; one of {', '.join(TASK_GROUPS)}")
    pinned = list(((obj.get("spec") or {}).get("tuning") or {}).get("pinnedGroups") or [])
    if pin and group not in pinned:
        pinned.append(group)
    if not pin:
        pinned = [g for g in pinned if g != group]
    action = f"{'pin' if pin else 'unpin'} {group} {new_id()}"
    return {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"],
                         "annotations": {ACTOR_ANNOTATION: actor, ACTION_ANNOTATION: action}},
            "spec": {"tuning": {"pinnedGroups": sorted(pinned)}}}


def pin(custom_api: Any, namespace: str, name: str, group: str, pinned: bool, actor: str,
        field_manager: str = "specd-controls") -> dict:
    """Read the object, send the patch (thin edge over ``CustomObjectsApi``)."""
    obj = custom_api.get_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace,
                                                  k8s.PLURAL, name)
    return custom_api.patch_namespaced_custom_object(
        k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, name,
        pin_patch(obj, group, pinned, actor), field_manager=field_manager, _content_type=MERGE)
