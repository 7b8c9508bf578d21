"""The tuner's I/O edge: one service's tuning interval against the cluster and Prometheus.

``Tuner.run(owner)`` is called by a kopf timer for every service with ``spec.tuning.enabled``;
it acts once the service's ``spec.tuning.interval`` has passed since ``status.tuning.lastRun``
(so an operator restart neither loses nor repeats an interval), under the object's lock
shared with reconciles. Reads the windows (``signals``), decides (``loop.tune``), writes
``status.tuning`` and the ``Tuned`` condition, then for every change: a history row, an
Event and ``specd_operator_policy_changes_total``; held decisions are logged, not stored.
A changed overlay is rendered by an immediate reconcile (a status write fires no handler).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from specd.api.spec import ServiceSpec, parse_spec
from specd.operator import metrics
from specd.operator.analysis.provider import MetricProvider, ProviderError
from specd.operator.history.recorder import Recorder
from specd.operator.kube import Kube
from specd.operator.rollout.canary import parse_duration
from specd.operator.status import _condition
from specd.operator.tuner import decide, signals
from specd.operator.tuner.loop import CONDITION_TUNED, Tuned, epoch, tune

log = logging.getLogger("specd.operator.tuner")


def frozen_by_rollout(status: dict[str, Any]) -> str | None:
    """Tuning waits while a canary is on: its analysis compares the tracks as they are."""
    rollout = status.get("rollout") or {}
    if status.get("canaryRevision") or rollout.get("canaryVersion"):
        return f"a canary rollout is in progress ({rollout.get('phase', 'Progressing')})"
    return None


class Tuner:
    def __init__(self, kube: Kube, provider: MetricProvider | None, recorder: Recorder | None,
                 lock: Callable[[str, str], AbstractContextManager[Any]],
                 reconcile: Callable[[dict[str, Any]], Any],
                 clock: Callable[[], float] = time.time) -> None:
        self.kube, self.provider, self.recorder = kube, provider, recorder
        self.lock, self.reconcile, self.clock = lock, reconcile, clock

    def run(self, namespace: str, name: str, force: bool = False) -> Tuned | None:
        """One interval if it is due (``force``: now); None when nothing was due. Prometheus
        is read outside the object's lock (a slow or stopped server must not hold up the
        reconciles); the decision and the write happen under it, on the object read again."""
        due = self._due(namespace, name, force)
        if due is None:
            return None
        spec, interval, last = due
        now = self.clock()
        windows, unavailable = self._windows(namespace, name, spec, now)
        with self.lock(namespace, name):
            again = self._due(namespace, name, force)
            if again is None or again[2] != last:
                return None  # the spec changed, or another run took this interval
            spec = again[0]
            owner = self.kube.get_service(namespace, name)
            if owner is None:
                return None
            status = owner.get("status") or {}
            result = tune(spec, status, windows, now, unavailable=unavailable,
                          frozen=frozen_by_rollout(status),
                          settings=decide.Settings.for_interval(
                              interval, spec.tuning.min_requests))
            if not self._write(owner, result):
                return None
        self._record(owner, result)
        if result.overlay_changed:
            fresh = self.kube.get_service(namespace, name)
            if fresh is not None:
                self.reconcile(fresh)
        return result

    def _due(self, namespace: str, name: str, force: bool
             ) -> tuple[ServiceSpec, float, float | None] | None:
        """(spec, interval, last run) when the service's interval is due, else None."""
        owner = self.kube.get_service(namespace, name)
        if owner is None or owner["metadata"].get("deletionTimestamp"):
            return None
        try:
            spec = parse_spec(owner.get("spec") or {})
            interval = parse_duration(spec.tuning.interval)
        except (ValidationError, ValueError):
            return None  # the reconciler reports the spec's problem
        if not spec.tuning.enabled:
            return None
        last = epoch(((owner.get("status") or {}).get("tuning") or {}).get("lastRun"))
        if not force and last is not None and self.clock() - last < interval:
            return None
        return spec, interval, last

    def _windows(self, namespace: str, name: str, spec: ServiceSpec, now: float
                 ) -> tuple[dict[str, decide.Window] | None, str | None]:
        if self.provider is None:
            return None, "no Prometheus to read (--prometheus-url)"
        try:
            vectors = signals.read(self.provider, signals.Queries(
                namespace, name, spec.tuning.interval))
        except ProviderError as exc:
            return None, str(exc)[:500]
        return signals.windows(vectors, now), None

    def _write(self, owner: dict[str, Any], result: Tuned) -> bool:
        """status.tuning and the Tuned condition, guarded by resourceVersion (a reconcile
        that wrote in between makes this interval run again on the next tick)."""
        meta = owner["metadata"]
        status = owner.get("status") or {}
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != CONDITION_TUNED]
        previous = next((c for c in status.get("conditions") or []
                         if c.get("type") == CONDITION_TUNED), None)
        ok, reason, message = result.condition
        conditions.append(_condition(CONDITION_TUNED, ok, reason, message,
                                     meta.get("generation", 1), previous,
                                     result.status["lastRun"]))
        try:
            self.kube.patch_status(meta["namespace"], meta["name"],
                                   {"tuning": result.status, "conditions": conditions},
                                   meta["resourceVersion"])
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        metrics.STATUS_WRITES.inc()
        return True

    def _record(self, owner: dict[str, Any], result: Tuned) -> None:
        meta = owner["metadata"]
        for group, why in result.holds.items():
            log.debug("%s/%s %s: hold (%s)", meta["namespace"], meta["name"], group, why)
        for change in result.changes:
            d = change.decision
            verb = "changed" if change.applied else "recommended (dry run)"
            message = f"{change.group}: {d.action} {verb}: {d.reason}"
            log.info("%s/%s %s", meta["namespace"], meta["name"], message)
            metrics.POLICY_CHANGES.labels(reason=d.action,
                                          applied=str(change.applied).lower()).inc()
            try:
                kopf.event(owner, type="Normal", reason="PolicyTuned" if change.applied
                           else "PolicyRecommended", message=message[:1000])
            except LookupError:
                pass  # outside kopf: the log line stands
            if self.recorder is not None:
                self.recorder.write("policy change", _row(owner, change.group, d,
                                                          change.before, change.after,
                                                          change.applied))


def _row(owner: dict[str, Any], group: str, decision: decide.Decision,
         before: dict[str, Any], after: dict[str, Any], applied: bool) -> Callable[[Any], Any]:
    meta = owner["metadata"]
    # "decision": the change in words (the evidence's "why" is what the window alone said)
    evidence = {**decision.evidence, "decision": decision.reason,
                "state": asdict(decision.state)}

    def write(store: Any) -> None:
        store.policy_change(namespace=meta["namespace"], service=meta["name"],
                            uid=meta["uid"], task_group=group,
                            at=datetime.fromtimestamp(decision.state.last_change or time.time(),
                                                      UTC),
                            reason=decision.action, before=before, after=after,
                            evidence=evidence, applied=applied)
    return write
