"""One tuning interval of one service, pure: windows in, ``status.tuning`` and changes out.

    result = tune(spec, status, windows, now, unavailable=None, frozen=None)

For every task group seen (in the window or in ``status.tuning.groups``) it rebuilds the
group's current policy from the spec and the overlay, asks ``decide`` what to do, and applies
a change to the overlay (unless ``spec.tuning.dryRun``). Everything the next interval needs
-- the overlay, the evidence streak, the last change, the plain back-off -- is in the returned
status, so nothing lives only in the operator's memory. The I/O around it (reading
Prometheus, writing the status, the history row, the Event) is ``operator/handlers.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from specd.api.metrics import TASK_GROUPS
from specd.api.policy import GroupPolicy, Policy
from specd.api.spec import GroupTuningStatus, ServiceSpec, TuningStatus
from specd.operator.tuner import decide
from specd.operator.tuner.overlay import overlay_document

CONDITION_TUNED = "Tuned"


@dataclass(frozen=True)
class Change:
    """A group's policy change, made (``applied``) or only recommended (dry run)."""

    group: str
    decision: decide.Decision
    before: dict[str, Any]
    after: dict[str, Any]
    applied: bool


@dataclass(frozen=True)
class Tuned:
    status: dict[str, Any]  # status.tuning, camelCase, ready for a merge patch
    condition: tuple[bool, str, str]  # the Tuned condition: (ok, reason, message)
    changes: list[Change] = field(default_factory=list)
    holds: dict[str, str] = field(default_factory=dict)  # group -> why it held

    @property
    def overlay_changed(self) -> bool:
        return any(c.applied for c in self.changes)


def iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def bounds_of(spec: ServiceSpec, mode: str) -> decide.Bounds:
    """spec.tuning.bounds for a group in ``mode``: the modes (empty: the configured mode
    and plain, the fallback where speculation loses) and the length range (fixedLength in
    fixed mode, maxVerify in scheduled mode, else 1..drafter.k)."""
    b = spec.tuning.bounds
    modes = tuple(b.modes) if b is not None and b.modes else (spec.effective_mode(), "plain")
    lengths = None
    if b is not None:
        lengths = b.fixed_length if mode == "fixed" else b.max_verify
    k_min, k_max = (lengths.min, lengths.max) if lengths is not None else (1, spec.drafter.k)
    return decide.Bounds(modes=modes, k_min=k_min, k_max=min(k_max, spec.drafter.k))


def group_policy(policy: Policy, speculative_mode: str | None) -> decide.GroupPolicy:
    """What decide controls, read from a group's effective policy."""
    if policy.mode == "plain":
        return decide.GroupPolicy("plain", policy.k_max,
                                  speculative_mode or "scheduled")  # type: ignore[arg-type]
    k = policy.fixed_length if policy.mode == "fixed" else policy.k_max
    return decide.GroupPolicy(policy.mode, k, policy.mode)


def overlay_entry(current: GroupPolicy | None, chosen: decide.GroupPolicy) -> GroupPolicy:
    """The overlay entry that makes a group run ``chosen``."""
    fields = current.model_dump(exclude_none=True) if current is not None else {}
    fields["mode"] = chosen.mode
    if chosen.mode != "plain":
        fields["k_max"] = chosen.k
        fields["fixed_length" if chosen.mode == "fixed" else "max_verify"] = chosen.k
        if chosen.mode == "fixed":
            fields.pop("max_verify", None)
    return GroupPolicy(**fields)


def tune(spec: ServiceSpec, status: Mapping[str, Any] | None,
         windows: Mapping[str, decide.Window] | None, now: float, *,
         unavailable: str | None = None, frozen: str | None = None,
         settings: decide.Settings | None = None) -> Tuned:
    """``windows``: per group (None when Prometheus could not answer: ``unavailable`` says
    why); ``frozen``: why nothing may change now (a canary in progress)."""
    s = settings or decide.Settings()
    previous = TuningStatus.model_validate((status or {}).get("tuning") or {})
    overlay: dict[str, GroupPolicy] = dict(previous.overlay)
    try:
        spec.policy(overlay)
    except ValueError:  # an overlay the spec no longer takes (render_policy leaves it out)
        overlay = {}
    groups = sorted((set(windows or {}) | set(previous.groups)) & set(TASK_GROUPS))
    judged = 0
    changes: list[Change] = []
    holds: dict[str, str] = {}
    written: dict[str, dict[str, Any]] = {}
    for group in groups:
        before = previous.groups.get(group) or GroupTuningStatus()
        effective = spec.policy(overlay).for_group(group)
        current = group_policy(effective, before.speculative_mode)
        state = decide.State(last_change=epoch(before.last_change),
                             backoff_s=before.backoff_seconds,
                             plain_since=epoch(before.plain_since),
                             recent=tuple(before.recent),  # type: ignore[arg-type]
                             recent_k=tuple(before.recent_k))
        window = (windows or {}).get(group)
        if window is not None and window.requests >= s.min_requests:
            judged += 1
        # without metrics nothing moves, not even a plain group's re-probe
        decision = decide.decide(window, current, state, bounds_of(spec, current.mode), now,
                                 s, pinned=group in spec.tuning.pinned_groups,
                                 frozen=frozen or ("no metrics" if unavailable else None))
        if unavailable is not None and not decision.changed:
            decision = replace(decision, reason=f"no change: {unavailable}")
        calibration = None
        if (not decision.changed and unavailable is None and frozen is None
                and group not in spec.tuning.pinned_groups and current.mode == "scheduled"
                and (state.last_change is None or now - state.last_change >= s.dwell_s)):
            calibration, why, evidence = decide.recalibrate(window, effective.calibration, s)
            if calibration is not None:
                decision = decide.Decision("recalibrate", current, replace(
                    decision.state, last_change=now, recent=(), recent_k=()), why, evidence)
        dry_run = None
        if decision.changed:
            if calibration is not None:  # the calibration alone: mode and K stay the spec's
                entry = (overlay.get(group) or GroupPolicy()).model_copy(
                    update={"calibration": calibration})
            else:
                entry = overlay_entry(overlay.get(group), decision.policy)
            before_doc, after_doc = asdict(current), asdict(decision.policy)
            if calibration is not None:
                before_doc["calibration"] = effective.calibration.model_dump()
                after_doc["calibration"] = calibration.model_dump()
            change = Change(group, decision, before_doc, after_doc,
                            applied=not spec.tuning.dry_run)
            changes.append(change)
            if spec.tuning.dry_run:
                dry_run = f"would {decision.action}: {decision.reason}"
                decision = replace(decision, policy=current, state=replace(
                    state, recent=(), recent_k=()))
            else:
                overlay[group] = entry
        else:
            holds[group] = decision.reason
        written[group] = _group_status(decision, dry_run, s)
    document: dict[str, Any] = {"lastRun": iso(now), "groups": written,
                                "overlay": overlay_document(overlay)}
    return Tuned(document, _condition(judged, unavailable, frozen, changes, holds, spec, s),
                 changes, holds)


def _group_status(decision: decide.Decision, dry_run: str | None,
                  s: decide.Settings) -> dict[str, Any]:
    st, chosen = decision.state, decision.policy
    hold_until = None
    if chosen.mode == "plain" and st.plain_since is not None:
        hold_until = st.plain_since + (st.backoff_s or s.backoff_s)
    elif st.last_change is not None:
        hold_until = st.last_change + s.dwell_s
    return {"mode": chosen.mode, "k": chosen.k, "speculativeMode": chosen.speculative_mode,
            "action": decision.action if not dry_run else "hold",
            "reason": decision.reason[:1024], "lastChange": iso(st.last_change),
            "holdUntil": iso(hold_until), "backoffSeconds": st.backoff_s,
            "plainSince": iso(st.plain_since), "recent": list(st.recent),
            "recentK": list(st.recent_k), "dryRun": dry_run}


def _condition(judged: int, unavailable: str | None, frozen: str | None,
               changes: list[Change], holds: Mapping[str, str], spec: ServiceSpec,
               s: decide.Settings) -> tuple[bool, str, str]:
    if unavailable is not None:
        return False, "MetricsUnavailable", f"no change: {unavailable}"
    if frozen is not None:
        return False, "Frozen", f"no change: {frozen}"
    if not judged:
        return False, "NoData", (f"no change: no task group finished {s.min_requests:.0f} "
                                 f"requests in the last {spec.tuning.interval}")
    if changes:
        verb = "recommended" if spec.tuning.dry_run else "changed"
        return True, "PolicyChanged" if not spec.tuning.dry_run else "Recommended", \
            "; ".join(f"{c.group} {verb}: {c.decision.reason}" for c in changes)[:1024]
    return True, "Held", "; ".join(f"{g}: {why}" for g, why in holds.items())[:1024]
