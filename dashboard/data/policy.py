"""The policy page's content (pure): the effective policy per track and task group, and the
tuner's state and decisions.

The stable track runs ``status.policy`` (what the operator last rendered into its ConfigMap).
A canary under ``spec.rollout.policyChanges: Canary`` runs the spec's policy with the tuned
overlay (``operator.tuner.overlay.render_policy``); otherwise both tracks run the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specd.api.metrics import TASK_GROUPS
from specd.api.policy import Policy
from specd.api.spec import parse_spec
from specd.operator.tuner.overlay import render_policy

Obj = Mapping[str, Any]


def _group_row(policy: Policy, group: str) -> dict[str, Any]:
    p = policy.for_group(group)
    calibration = p.calibration
    return {"mode": p.mode, "K": p.k_max if p.mode != "plain" else "-",
            "verify": (p.fixed_length if p.mode == "fixed" else
                       f"{p.min_verify}..{p.max_verify}" if p.mode == "scheduled" else "-"),
            "survival floor": p.survival_floor if p.mode == "scheduled" else "-",
            "calibration": (f"T {list(calibration.temperature) or '-'}, "
                            f"bias {list(calibration.bias) or '-'}")
            if (calibration.temperature or calibration.bias) else "-",
            "overridden": "yes" if group in policy.groups else "no"}


def effective(obj: Obj) -> dict[str, list[dict[str, Any]]]:
    """track -> one row per task group: what a request of that group runs."""
    status = obj.get("status") or {}
    out: dict[str, list[dict[str, Any]]] = {}
    stable = Policy.model_validate(status["policy"]) if status.get("policy") else None
    spec_doc = obj.get("spec") or {}
    canary = None
    if status.get("canaryRevision"):
        by_policy = (spec_doc.get("rollout") or {}).get("policyChanges") == "Canary"
        if by_policy:
            canary = render_policy(parse_spec(spec_doc), obj)
        else:
            canary = stable
    for track, policy in (("stable", stable), ("canary", canary)):
        if policy is not None:
            out[track] = [{"task group": g, **_group_row(policy, g)} for g in TASK_GROUPS]
    return out


def tuner_rows(obj: Obj) -> list[dict[str, Any]]:
    """``status.tuning.groups`` per task group (as ``kubectl specd policy`` prints it)."""
    spec = obj.get("spec") or {}
    pinned = set((spec.get("tuning") or {}).get("pinnedGroups") or [])
    groups = ((obj.get("status") or {}).get("tuning") or {}).get("groups") or {}
    return [{"task group": g, "mode": (groups.get(g) or {}).get("mode") or "-",
             "K": (groups.get(g) or {}).get("k") or "-", "pinned": "yes" if g in pinned else "no",
             "last change": (groups.get(g) or {}).get("lastChange") or "-",
             "hold until": (groups.get(g) or {}).get("holdUntil") or "-",
             "reason": (groups.get(g) or {}).get("dryRun") or (groups.get(g) or {}).get(
                 "reason") or "-"}
            for g in sorted(set(groups) | pinned)]


def change_rows(changes: Sequence[Any]) -> list[dict[str, Any]]:
    """History store policy changes (``PolicyChangeRecord``) as rows, with the evidence the
    decision rested on."""
    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)

    return [{"at": c.at.strftime("%Y-%m-%d %H:%M:%S"), "task group": c.task_group,
             "action": c.action if c.applied else f"{c.action} (recommended)",
             "before": c.before.get("mode"), "after": c.after.get("mode"),
             "goodput": num(c.evidence.get("goodput")),
             "true plain": num(c.evidence.get("plain_goodput")),
             "requests": num(c.evidence.get("requests")),
             "why": c.evidence.get("decision") or c.evidence.get("why") or ""}
            for c in changes]
