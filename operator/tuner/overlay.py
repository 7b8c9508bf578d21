"""The tuned overlay: per-group policy settings the tuner keeps in ``status.tuning.overlay``.

The user's spec is never edited: the reconciler renders the ConfigMap from
``spec.policy(overlay)`` (``ServiceSpec.policy``: pinned groups and tuning switched off leave
the overlay out), so a tuned change takes the same path as a policy edit (hot reload, or a
policy canary under ``spec.rollout.policyChanges: Canary``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from specd.api.policy import GroupPolicy, Policy
from specd.api.spec import ServiceSpec

log = logging.getLogger("specd.operator.tuner")


def read_overlay(owner: Mapping[str, Any]) -> dict[str, GroupPolicy]:
    """``status.tuning.overlay`` as group -> overrides; an entry that does not validate (a
    hand-edited status) is left out with a warning, never rendered."""
    raw = ((owner.get("status") or {}).get("tuning") or {}).get("overlay") or {}
    out: dict[str, GroupPolicy] = {}
    for group, fields in raw.items():
        try:
            out[group] = GroupPolicy.model_validate(fields)
        except ValidationError as exc:
            log.warning("status.tuning.overlay.%s ignored: %s", group,
                        exc.errors()[0].get("msg", exc))
    return out


def overlay_document(overlay: Mapping[str, GroupPolicy]) -> dict[str, dict[str, Any] | None]:
    """The overlay as written to the status (a merge patch: None removes a group)."""
    return {group: policy.model_dump(mode="json", exclude_none=True) or None
            for group, policy in overlay.items()}


def render_policy(spec: ServiceSpec, owner: Mapping[str, Any]) -> Policy:
    """The policy the workers run: the spec with the overlay; an overlay the spec can no
    longer take (edited since: a lower drafter.k) is left out with a warning, so the tuner's
    state never degrades the service (the spec's own errors still raise)."""
    overlay = read_overlay(owner)
    if overlay:
        try:
            return spec.policy(overlay)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            log.warning("status.tuning.overlay ignored: %s", str(exc).splitlines()[0])
    return spec.policy()
