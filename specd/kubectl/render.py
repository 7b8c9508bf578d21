"""What ``kubectl specd`` prints, from SpeculativeService objects, Events and the history
store's records (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

Obj = Mapping[str, Any]

EXIT_HEALTHY, EXIT_DEGRADED, EXIT_TIMEOUT, EXIT_PROGRESSING = 0, 1, 2, 3


def _status(obj: Obj) -> Mapping[str, Any]:
    return obj.get("status") or {}


def _rollout(obj: Obj) -> Mapping[str, Any]:
    return _status(obj).get("rollout") or {}


def _age(timestamp: str | None, now: datetime) -> str:
    if not timestamp:
        return "-"
    then = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    seconds = int((now - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def steps_of(obj: Obj) -> list[Mapping[str, Any]]:
    return list(((obj.get("spec") or {}).get("rollout") or {}).get("steps") or [])


def step_label(obj: Obj) -> str:
    steps, rollout = steps_of(obj), _rollout(obj)
    if not steps or not _status(obj).get("canaryRevision"):
        return "-"
    return f"{min(int(rollout.get('step', 0)) + 1, len(steps))}/{len(steps)}"


def list_table(objects: Sequence[Obj], now: datetime, namespaces: bool = False) -> str:
    head = (["NAMESPACE"] if namespaces else []) + [
        "NAME", "PHASE", "READY", "STABLE", "CANARY", "STEP", "WEIGHT", "ROLLOUT", "AGE"]
    rows = [head]
    for obj in objects:
        meta, status, rollout = obj["metadata"], _status(obj), _rollout(obj)
        weight = (f"{rollout.get('setWeight', 0)}/{status.get('canaryWeight', 0)}"
                  if status.get("canaryRevision") else "-")
        rows.append(([meta["namespace"]] if namespaces else []) + [
            meta["name"], status.get("phase", "Pending"), status.get("ready", "-"),
            status.get("stableRevision") or "-", status.get("canaryRevision") or "-",
            step_label(obj), weight, rollout.get("phase", "-"),
            _age(meta.get("creationTimestamp"), now)])
    return table(rows)


def detail(obj: Obj) -> str:
    """``kubectl specd get NAME``: the rollout, its steps and the latest analysis."""
    meta, status, rollout = obj["metadata"], _status(obj), _rollout(obj)
    spec = obj.get("spec") or {}
    lines = [
        f"Name:            {meta['name']}",
        f"Namespace:       {meta['namespace']}",
        f"Phase:           {status.get('phase', 'Pending')}  ({status.get('ready', '-')} ready)",
        f"Strategy:        {(spec.get('rollout') or {}).get('strategy', 'RollingUpdate')}",
        f"Stable:          {status.get('stableRevision') or '-'}",
        f"Canary:          {status.get('canaryRevision') or '-'}",
        f"Rollout:         {rollout.get('phase', '-')}"
        + (f" ({rollout['pauseReason']})" if rollout.get("pauseReason") else ""),
        f"Weight:          set {rollout.get('setWeight', 0)}%, actual "
        f"{status.get('canaryWeight', 0)}%",
        f"Message:         {rollout.get('message') or '-'}",
    ]
    steps = steps_of(obj)
    if steps:
        current = int(rollout.get("step", 0)) if status.get("canaryRevision") else -1
        rows = [["", "STEP", "WEIGHT", "PAUSE"]]
        for index, step in enumerate(steps):
            pause = step.get("pause")
            shown = "-" if pause is None else (pause.get("duration") or "until promoted")
            rows.append(["->" if index == current else "", str(index + 1),
                         f"{step['weight']}%", shown])
        lines += ["", "Steps:", table(rows)]
    analysis = status.get("analysis") or []
    if analysis:
        rows = [["METRIC", "GROUP", "CANARY", "STABLE", "VALUE", "VERDICT", "MESSAGE"]]

        def num(value: Any) -> str:
            return "-" if value is None else f"{float(value):.4g}"

        for result in analysis:
            rows.append([result["name"], result.get("taskGroup") or "all",
                         num(result.get("canary")), num(result.get("stable")),
                         num(result.get("value")), result["verdict"],
                         result.get("message", "")])
        at = analysis[0].get("at", "")
        lines += ["", f"Analysis (latest, {at}):", table(rows)]
    checks = ", ".join(f"{k.removesuffix('Checks')} {rollout[k]}" for k in (
        "successfulChecks", "failedChecks", "inconclusiveChecks", "errorChecks")
        if rollout.get(k))
    if checks:
        lines.append(f"Checks this step: {checks}")
    return "\n".join(lines)


def status_line(obj: Obj) -> tuple[int, str]:
    """``kubectl specd status``: (exit code, one line). 0 healthy, 1 degraded or rolled back,
    3 still progressing or paused (``--watch`` turns that into waiting, 2 on timeout)."""
    status, rollout = _status(obj), _rollout(obj)
    phase, rollout_phase = status.get("phase", "Pending"), rollout.get("phase")
    message = rollout.get("message") or next(
        (c.get("message", "") for c in status.get("conditions", []) if c.get("type") ==
         ("Degraded" if phase == "Degraded" else "Ready")), "")
    if phase == "Degraded" or rollout_phase == "RolledBack":
        return EXIT_DEGRADED, f"Degraded: {message}"
    if phase == "Ready" and rollout_phase in (None, "Healthy"):
        return EXIT_HEALTHY, f"Healthy: {message or status.get('ready', '')}"
    return EXIT_PROGRESSING, f"{rollout_phase or phase}: {message}"


def history(events: Sequence[Obj]) -> str:
    """The object's rollout events, oldest first (from Kubernetes Events)."""
    rows = [["TIME", "TYPE", "REASON", "MESSAGE"]]
    for event in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime")
                        or ""):
        rows.append([event.get("lastTimestamp") or event.get("eventTime") or "-",
                     event.get("type", ""), event.get("reason", ""),
                     (event.get("message") or "").replace("\n", " ")[:160]])
    return table(rows) if len(rows) > 1 else "no events (Kubernetes keeps them for an hour)"


# ---- the history store (``kubectl specd history --history-url``) ----------------------------


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration(delta: Any) -> str:
    """``timedelta`` -> 45s, 5m03s, 2h07m, 3d04h."""
    seconds = max(int(delta.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _indent(text: str, by: str = "    ") -> str:
    return "\n".join(by + line for line in text.splitlines())


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def rollout_history(rollouts: Sequence[Any], now: datetime, *, measurements: bool = False,
                    total: int | None = None, reason_width: int = 100) -> str:
    """Rollouts from the history store (``specd.operator.history.queries.RolloutRecord``),
    newest first: one header line each (start, stable -> canary, outcome, duration, who
    decided), then its events and, with ``measurements``, its analysis measurements.
    An event's STEP is the step the rollout was at after it, 1-based as ``kubectl specd
    get`` and the events' messages count (one past the last step: promoting, promoted)."""
    if not rollouts:
        return "no rollouts recorded"
    blocks = []
    for r in rollouts:
        if r.in_progress:
            outcome, took = "in progress", f"running {duration(r.duration(now))}"
        else:
            outcome = r.outcome
            took = duration(r.duration()) if r.ended_at else "-"
        head = f"{_when(r.started_at)}  {r.stable} -> {r.canary}  {outcome}  {took}"
        if r.decided_by:
            head += f"  by {r.decided_by}"
        lines = [head]
        last = r.events[-1].reason if r.events else None
        if r.message and not r.in_progress and r.message != last:
            lines.append(f"    {r.message.splitlines()[0][:reason_width]}")
        rows = [["TIME", "STEP", "WEIGHT", "ACTION", "ACTOR", "REASON"]]
        for e in r.events:
            rows.append([_when(e.at), str(e.step + 1), f"{e.weight}%", e.action,
                         e.actor or "-", (e.reason or "").replace("\n", " ")[:reason_width]])
        lines.append(_indent(table(rows)) if len(rows) > 1 else "    no events recorded")
        if measurements and r.measurements:
            rows = [["TIME", "STEP", "NAME", "METRIC", "GROUP", "CANARY", "STABLE", "VALUE",
                     "VERDICT"]]
            for m in r.measurements:
                rows.append([_when(m.at), str(m.step + 1), m.name, m.metric,
                             m.task_group or "all", _num(m.canary), _num(m.stable),
                             _num(m.value), m.verdict])
            lines += [f"    Measurements ({len(r.measurements)}):", _indent(table(rows))]
        elif r.measurement_count:
            plural = "s" if r.measurement_count != 1 else ""
            lines.append(f"    {r.measurement_count} analysis measurement{plural} "
                         f"(--measurements shows them)")
        blocks.append("\n".join(lines))
    text = "\n\n".join(blocks)
    if total is not None and total > len(rollouts):
        text += (f"\n\n(the newest {len(rollouts)} of {total} rollouts; --limit N shows more)")
    return text


def policy_table(obj: Obj) -> str:
    """``kubectl specd policy NAME``: per task group, what it runs and why (status.tuning)."""
    spec = obj.get("spec") or {}
    tuning = _status(obj).get("tuning") or {}
    pinned = set((spec.get("tuning") or {}).get("pinnedGroups") or [])
    enabled = bool((spec.get("tuning") or {}).get("enabled"))
    groups = tuning.get("groups") or {}
    rows = [["GROUP", "MODE", "K", "PINNED", "LAST CHANGE", "HOLD UNTIL", "REASON"]]
    for group in sorted(set(groups) | pinned):
        g = groups.get(group) or {}
        rows.append([group, str(g.get("mode") or "-"), str(g.get("k") or "-"),
                     "yes" if group in pinned else "no", str(g.get("lastChange") or "-"),
                     str(g.get("holdUntil") or "-"),
                     str(g.get("dryRun") or g.get("reason") or "-")[:100]])
    head = (f"tuning: {'on' if enabled else 'off'}"
            f"{' (dry run)' if (spec.get('tuning') or {}).get('dryRun') else ''}, "
            f"last interval {tuning.get('lastRun') or 'never'}")
    if len(rows) == 1:
        return head + "\nno task group judged yet"
    return head + "\n" + table(rows)
