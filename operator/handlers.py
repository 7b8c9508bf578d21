"""kopf handlers: level-based reconcile of SpeculativeServices and their children.

Every trigger (create, update, resume after a restart, a periodic resync, a child
Deployment deleted behind our back) runs the same idempotent reconcile: build the desired
children with the pure builders, server-side apply them, read the Deployments back and
merge-patch the status. Deployment events refresh the status only, so readiness shows up
without polling. Transient API failures are retried with backoff; configuration errors
become a Degraded condition (and a Warning event) and wait for the next edit, never a crash
loop.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from specd.api import k8s
from specd.api.policy import Policy
from specd.api.spec import ServiceSpec, parse_spec
from specd.operator import metrics
from specd.operator.analysis.judge import Result
from specd.operator.analysis.probe_client import AddressMap, ProbeClient
from specd.operator.analysis.provider import MetricProvider, PrometheusProvider
from specd.operator.analysis.run import run as run_analysis
from specd.operator.analysis.run import window as analysis_window
from specd.operator.history import store as history_store
from specd.operator.history.recorder import Recorder, tick_writes
from specd.operator.kube import Kube, TransientError, classify, make_api_client
from specd.operator.manifests import desired_children, revision
from specd.operator.rollout import children
from specd.operator.rollout.canary import Config as CanaryConfig
from specd.operator.rollout.canary import Measurement, Plan, advance
from specd.operator.rollout.state import RolloutState, from_status
from specd.operator.status import ConfigError, carried_error, compute_status, status_changed
from specd.operator.tuner.overlay import render_policy
from specd.operator.tuner.timer import Tuner

log = logging.getLogger(__name__)
KOPF_PREFIX = f"operator.{k8s.GROUP}"


@dataclass
class OperatorConfig:
    kubeconfig: str | None = None
    resync_seconds: float = 300.0
    rollout_tick_seconds: float = 2.0
    tuner_tick_seconds: float = 10.0  # how often services' tuning intervals are checked
    max_workers: int = 8
    prometheus_url: str | None = None
    history_url: str | None = None
    migrate: bool = True
    pod_address_map: str | None = None  # "podIP:port" -> "host:port" for the probes
    own_namespace: str | None = None  # let through the workers' NetworkPolicies (probes)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def backoff(retry: int) -> float:
    """Seconds before retry number ``retry`` (exponential, capped, jittered)."""
    return min(60.0, 2.0 ** min(retry, 6)) * random.uniform(0.8, 1.2)


def _stable(deployments: list[dict[str, Any]]) -> dict[str, Any] | None:
    for dep in deployments:
        if dep["metadata"].get("labels", {}).get(k8s.LABEL_TRACK) == "stable":
            return dep
    return None


def _short(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"spec.{loc}: {err.get('msg')}")
    return "; ".join(parts)


class Reconciler:
    """The operator core, independent of kopf's plumbing (kopf handlers call into it)."""

    def __init__(self, kube: Kube, provider: MetricProvider | None = None,
                 recorder: Recorder | None = None, probes: ProbeClient | None = None,
                 own_namespace: str | None = None) -> None:
        self.kube = kube
        self.own_namespace = own_namespace
        self.provider = provider
        self.probes = probes or ProbeClient(kube)
        self.recorder = recorder
        self._phases: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._object_locks: dict[tuple[str, str], threading.Lock] = {}
        self.tuner = Tuner(kube, provider, recorder, self.object_lock,
                           lambda owner: self.reconcile(owner, trigger="tuner"))
        self.reconciles = 0
        self.last_ok: float | None = None

    # -- status ---------------------------------------------------------------------------

    def _write_status(self, namespace: str, name: str,
                      compute: Callable[[dict[str, Any]], dict[str, Any]],
                      guard: str | None = None) -> dict | None:
        """Recompute and merge-patch the status, guarded by resourceVersion (retry on 409).
        With ``guard`` (what a rollout tick was planned from, :func:`_tick_guard`) the write
        happens only while the object still says the same; otherwise the tick is dropped and
        planned again from the fresh object."""
        for _ in range(5):
            owner = self.kube.get_service(namespace, name)
            if owner is None or owner["metadata"].get("deletionTimestamp"):
                return None
            if guard is not None and _tick_guard(owner) != guard:
                raise TransientError(f"{namespace}/{name} changed while its rollout ticked")
            new = compute(owner)
            if status_changed(owner.get("status"), new):
                try:
                    self.kube.patch_status(namespace, name, new,
                                           owner["metadata"]["resourceVersion"])
                except ApiException as exc:
                    if exc.status == 409:
                        continue  # re-read; a guarded tick re-checks its guard
                    raise
                metrics.STATUS_WRITES.inc()
            self._record_phase(namespace, name, new.get("phase"))
            return new
        raise TransientError(f"status of {namespace}/{name}: conflicting writers")

    def _record_phase(self, namespace: str, name: str, phase: str | None) -> None:
        with self._lock:
            if phase is None:
                self._phases.pop((namespace, name), None)
            else:
                self._phases[(namespace, name)] = phase
            counts: dict[str, int] = {}
            for value in self._phases.values():
                counts[value] = counts.get(value, 0) + 1
        for phase_name in ("Pending", "Progressing", "Ready", "Degraded"):
            metrics.SERVICES.labels(phase=phase_name).set(counts.get(phase_name, 0))

    def forget(self, namespace: str, name: str) -> None:
        self._record_phase(namespace, name, None)
        metrics.record_rollout(namespace, name, None, 0, 0)

    # -- reconcile ------------------------------------------------------------------------

    def reconcile(self, owner: dict[str, Any], trigger: str,
                  logger: Any = log) -> dict | None:
        """Make the children match the spec and write the status. Raises TransientError.

        ``logger``: kopf's per-object logger, which turns warnings into Kubernetes Events."""
        meta = owner["metadata"]
        # the update handler, the rollout timer and the tuner of one object take turns
        with self.object_lock(meta["namespace"], meta["name"]):
            return self._reconcile(owner, trigger, logger)

    def object_lock(self, namespace: str, name: str) -> threading.Lock:
        with self._lock:
            return self._object_locks.setdefault((namespace, name), threading.Lock())

    def _reconcile(self, owner: dict[str, Any], trigger: str, logger: Any) -> dict | None:
        meta = owner["metadata"]
        namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation", 1)
        started = time.monotonic()
        spec: ServiceSpec | None = None
        rev: str | None = None
        policy: Policy | None = None
        error: ConfigError | None = None
        try:
            spec = parse_spec(owner.get("spec") or {})
            rev, policy = revision(spec), render_policy(spec, owner)
        except (ValidationError, ValueError) as exc:
            message = _short(exc) if isinstance(exc, ValidationError) else str(exc)
            error = ConfigError("InvalidSpec", message)
            spec = rev = policy = None
        try:
            plan: Plan | None = None
            tick: Tick | None = None
            steps: list[children.Action] = []
            results: list[Result] = []
            if error is None and spec is not None and rev is not None:
                if spec.rollout.strategy == "Canary":
                    fresh = self.kube.get_service(namespace, name)
                    if fresh is None or fresh["metadata"].get("deletionTimestamp"):
                        return None
                    owner, generation = fresh, fresh["metadata"].get("generation", generation)
                    # plan from the spec of the object read now, not the event's copy
                    spec = parse_spec(owner.get("spec") or {})
                    rev, policy = revision(spec), render_policy(spec, owner)
                    tick = self._canary(owner, spec, rev, policy)
                    plan, steps, results = tick.plan, tick.steps, tick.results
                else:
                    error = self._execute(namespace, [
                        children.Apply(c) for c in desired_children(owner, spec, policy,
                                                                    self.own_namespace)])

            def compute(current: dict[str, Any]) -> dict[str, Any]:
                deployments = self.kube.list_deployments(namespace, name)
                status = compute_status(
                    name=name, generation=generation, spec=spec, revision=rev, policy=policy,
                    stable=_stable(deployments), error=error, previous=current.get("status"),
                    now=now(), reconciled=True)
                if plan is not None:
                    status.update(children.rollout_status(plan, children.seen(deployments)))
                    if results:
                        status["analysis"] = children.analysis_status(results, now())
                    status = children.degrade_if_rolled_back(status, plan.state, now())
                return status

            try:
                if plan is not None:
                    # A tick of the state machine: its decision is written first, then acted
                    # on, so children never run ahead of what .status records (a tick that
                    # loses the write acts on nothing; the next one plans again).
                    status = self._write_status(namespace, name, compute, guard=_tick_guard(owner))
                    self._post(owner, plan, logger)
                    metrics.record_rollout(namespace, name, plan.state.phase, plan.state.step,
                                           plan.weight)
                    if self.recorder is not None and tick is not None:
                        for what, write in tick_writes(owner, tick.before, plan, results,
                                                       tick.window, tick.now):
                            self.recorder.write(what, write)
                    error = self._execute(namespace, steps)
                    if error is not None:
                        status = self._write_status(namespace, name, compute)
                else:
                    status = self._write_status(namespace, name, compute)
            except TransientError:
                raise
            except Exception as exc:  # noqa: BLE001 - classified, unknown re-raised
                problem = classify(exc)
                raise (problem if isinstance(problem, TransientError)
                       else TransientError(str(problem))) from exc
        except TransientError:
            metrics.RECONCILES.labels(trigger=trigger, result="transient_error").inc()
            metrics.API_ERRORS.labels(kind="transient").inc()
            raise
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
        self.reconciles += 1
        if error is not None:
            metrics.RECONCILES.labels(trigger=trigger, result="config_error").inc()
            metrics.API_ERRORS.labels(kind="config").inc()
            logger.warning("Degraded (%s): %s", error.reason, error.message)
            try:  # a Warning Event on the object, for `kubectl describe` (kopf handlers only)
                kopf.warn(owner, reason=error.reason, message=error.message[:1000])
            except LookupError:
                pass  # called outside kopf (no event queue): the log line is all we have
        else:
            metrics.RECONCILES.labels(trigger=trigger, result="ok").inc()
            self.last_ok = time.time()
        return status

    def _canary(self, owner: dict[str, Any], spec: ServiceSpec, rev: str,
                policy: Policy) -> Tick:
        """One tick of the canary state machine, from the object as it is now."""
        namespace, name = owner["metadata"]["namespace"], owner["metadata"]["name"]
        by_policy = spec.rollout.policy_changes == "Canary"
        deployments = self.kube.list_deployments(namespace, name)
        configmaps = self.kube.list_configmaps(namespace, name) if by_policy else []
        observed = children.seen(deployments, configmaps, by_policy)
        status = owner.get("status") or {}
        state = children.initial_state(status, from_status(status.get("rollout")), observed,
                                       by_policy)
        config = CanaryConfig.from_spec(spec.rollout)
        desired = children.version(rev, policy, by_policy)
        results: list[Result] = []
        at = time.time()
        plan = advance(config, spec.replicas, desired, state, observed, at,
                       self.measure(owner, spec, results) if config.analysis else None)
        return Tick(plan, children.actions(owner, spec, desired, plan, deployments, by_policy,
                                           policy, self.own_namespace),
                    results, state, at, analysis_window(spec.rollout.analysis)
                    if spec.rollout.analysis else "")

    def measure(self, owner: dict[str, Any], spec: ServiceSpec,
                results: list[Result]) -> Callable[[], Measurement]:
        """The step's analysis against Prometheus, canary against stable, and the lossless
        probes; ``results`` gets every result for the status. Without a Prometheus
        (``--prometheus-url``) a metric measures Error, never a pass."""
        namespace, name = owner["metadata"]["namespace"], owner["metadata"]["name"]

        def run() -> Measurement:
            analysis = spec.rollout.analysis
            assert analysis is not None
            probe = (lambda: self.probes.run(analysis.probes, namespace, name)) \
                if analysis.probes is not None else None
            measurement, found = run_analysis(analysis, self.provider, namespace, name, probe)
            results.extend(found)
            for result in found:
                metrics.MEASUREMENTS.labels(verdict=result.verdict).inc()
            return measurement
        return run

    def _execute(self, namespace: str, steps: list[children.Action]) -> ConfigError | None:
        """Apply and scale children in order; a configuration error stops there."""
        for step in steps:
            try:
                if isinstance(step, children.Apply):
                    self.kube.apply(step.manifest)
                else:
                    self.kube.scale_deployment(namespace, step.deployment, step.replicas)
            except Exception as exc:  # noqa: BLE001 - classified, unknown re-raised
                problem = classify(exc)
                if isinstance(problem, TransientError):
                    raise problem from exc
                what = (f"{step.manifest['kind']} {step.manifest['metadata']['name']}"
                        if isinstance(step, children.Apply) else f"Deployment {step.deployment}")
                return ConfigError(problem.reason, f"{what}: {problem.message}")
        return None

    def _post(self, owner: dict[str, Any], plan: Plan, logger: Any) -> None:
        """The tick's events, once its status is written (a conflicted tick posts none)."""
        for event in plan.events:
            logger.info("rollout %s: %s", event.reason, event.message)
            metrics.ROLLOUT_EVENTS.labels(reason=event.reason).inc()
            try:
                kopf.event(owner, type=event.type, reason=event.reason,
                           message=event.message[:1000])
            except LookupError:
                pass  # outside kopf: the log line stands

    def refresh(self, namespace: str, name: str) -> dict | None:
        """Recompute the status from the Deployments without applying anything."""

        def compute(owner: dict[str, Any]) -> dict[str, Any]:
            generation = owner["metadata"].get("generation", 1)
            status = owner.get("status") or {}
            spec: ServiceSpec | None = None
            rev = None
            error = carried_error(status, generation)
            try:
                spec = parse_spec(owner.get("spec") or {})
                rev = revision(spec)
            except (ValidationError, ValueError) as exc:
                error = error or ConfigError("InvalidSpec", str(exc)[:500])
            deployments = self.kube.list_deployments(namespace, name)
            new = compute_status(
                name=name, generation=status.get("observedGeneration", generation), spec=spec,
                revision=rev, policy=None, stable=_stable(deployments), error=error,
                previous=status, now=now(), reconciled=False)
            if spec is not None and spec.rollout.strategy == "Canary":
                new = children.degrade_if_rolled_back(
                    new, from_status(status.get("rollout")), now())
            return new

        return self._write_status(namespace, name, compute)


@dataclass(frozen=True)
class Tick:
    """One rollout tick: the plan, the children it implies, the analysis it ran, the state it
    started from, when, and the analysis window."""

    plan: Plan
    steps: list[children.Action]
    results: list[Result]
    before: RolloutState
    now: float
    window: str


def _tick_guard(owner: dict[str, Any]) -> str:
    """What a rollout tick was planned from: the spec's generation and the rollout state
    (not the resourceVersion, which kopf's own annotation writes move on every handler)."""
    return json.dumps([owner["metadata"].get("generation"),
                       (owner.get("status") or {}).get("rollout")], sort_keys=True)


def _owner_from(body: Any) -> dict[str, Any]:
    """A plain dict of the parts of a kopf body the reconciler reads."""
    return {
        "apiVersion": body.get("apiVersion", k8s.API_VERSION),
        "kind": body.get("kind", k8s.KIND),
        "metadata": dict(body["metadata"]),
        "spec": body.get("spec"),
        "status": body.get("status"),
    }



def open_history(cfg: OperatorConfig) -> Recorder | None:
    """The history store's recorder, migrated first unless told not to. A store that cannot
    be reached is logged and counted; the operator runs on (its rollouts live in .status)."""
    if not cfg.history_url:
        return None
    if cfg.migrate:
        try:
            history_store.upgrade(cfg.history_url)
        except Exception as exc:  # noqa: BLE001 - never a reason not to reconcile
            metrics.STORE_WRITE_ERRORS.labels(kind="migrate").inc()
            log.error("history store: migration failed: %s", exc)
    return Recorder(history_store.HistoryStore(cfg.history_url))


def register(registry: kopf.OperatorRegistry, cfg: OperatorConfig) -> dict[str, Any]:
    """Register the handlers on ``registry``; returns a holder with the reconciler once up."""
    holder: dict[str, Any] = {}
    resource = (k8s.GROUP, k8s.VERSION, k8s.PLURAL)

    def reconciler() -> Reconciler:
        return holder["reconciler"]

    @kopf.on.startup(id="configure", registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # kopf's bookkeeping lives in annotations under its own prefix (the status schema is
        # structural, so status.kopf would be pruned).
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix=KOPF_PREFIX)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=KOPF_PREFIX, key="last-handled-configuration")
        settings.persistence.finalizer = f"{k8s.GROUP}/operator"
        settings.posting.level = logging.WARNING  # Warning events only (Degraded)
        settings.execution.max_workers = cfg.max_workers
        settings.networking.error_backoffs = [1, 2, 5, 10, 20, 30]
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        api = make_api_client(cfg.kubeconfig, pool=cfg.max_workers + 4)
        provider = PrometheusProvider(cfg.prometheus_url) if cfg.prometheus_url else None
        kube = Kube(api)
        holder["reconciler"] = Reconciler(kube, provider, open_history(cfg),
                                          ProbeClient(kube, AddressMap(cfg.pod_address_map)),
                                          cfg.own_namespace)

    @kopf.on.login(id="login", registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if cfg.kubeconfig:
            return kopf.login_with_kubeconfig(**kwargs)
        return kopf.login_via_client(**kwargs)

    @kopf.on.probe(id="reconciles", registry=registry)
    def probe_reconciles(**_: Any) -> int:
        return reconciler().reconciles if "reconciler" in holder else 0

    @kopf.on.resume(*resource, id="reconcile", registry=registry)
    @kopf.on.create(*resource, id="reconcile", registry=registry)
    @kopf.on.update(*resource, id="reconcile", registry=registry)
    def reconcile(body: kopf.Body, reason: Any, retry: int, logger: Any, **_: Any) -> None:
        try:
            reconciler().reconcile(_owner_from(body), trigger=getattr(reason, "value", reason),
                                   logger=logger)
        except TransientError as exc:
            raise kopf.TemporaryError(str(exc), delay=backoff(retry)) from exc

    @kopf.timer(*resource, id="resync", interval=cfg.resync_seconds,
                initial_delay=cfg.resync_seconds, registry=registry)
    def resync(body: kopf.Body, retry: int, logger: Any, **_: Any) -> None:
        try:
            reconciler().reconcile(_owner_from(body), trigger="resync", logger=logger)
        except TransientError as exc:
            raise kopf.TemporaryError(str(exc), delay=backoff(retry)) from exc

    def canary(spec: kopf.Spec, **_: Any) -> bool:
        return (spec.get("rollout") or {}).get("strategy") == "Canary"

    @kopf.timer(*resource, id="rollout", interval=cfg.rollout_tick_seconds,
                initial_delay=cfg.rollout_tick_seconds, when=canary, registry=registry)
    def rollout_tick(body: kopf.Body, retry: int, logger: Any, **_: Any) -> None:
        """A canary moves on time (pauses, analysis intervals, deadlines), not only on events."""
        try:
            reconciler().reconcile(_owner_from(body), trigger="rollout", logger=logger)
        except TransientError as exc:
            raise kopf.TemporaryError(str(exc), delay=backoff(retry)) from exc

    def tuning(spec: kopf.Spec, **_: Any) -> bool:
        return bool((spec.get("tuning") or {}).get("enabled"))

    @kopf.timer(*resource, id="tuner", interval=cfg.tuner_tick_seconds,
                initial_delay=cfg.tuner_tick_seconds, when=tuning, registry=registry)
    def tuner_tick(body: kopf.Body, retry: int, **_: Any) -> None:
        """Each service's verification policy follows its live metrics (operator/tuner)."""
        meta = body["metadata"]
        try:
            reconciler().tuner.run(meta["namespace"], meta["name"])
        except TransientError as exc:
            raise kopf.TemporaryError(str(exc), delay=backoff(retry)) from exc
        except ApiException as exc:
            raise kopf.TemporaryError(f"tuner: {exc.status} {exc.reason}",
                                      delay=backoff(retry)) from exc

    @kopf.on.event(*resource, id="forget-deleted", registry=registry)
    def service_event(event: kopf.RawEvent, namespace: str, name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            reconciler().forget(namespace, name)

    @kopf.on.event("apps", "v1", "deployments", id="child-deployment",
                   labels={k8s.LABEL_MANAGED_BY: k8s.MANAGED_BY}, registry=registry)
    def deployment_event(event: kopf.RawEvent, body: kopf.Body, logger: Any, **_: Any) -> None:
        meta = body["metadata"]
        service = (meta.get("labels") or {}).get(k8s.LABEL_SERVICE)
        if not service or "reconciler" not in holder:
            return
        namespace = meta["namespace"]
        try:
            if event.get("type") == "DELETED":
                # A child vanished: re-create it unless its owner is going away too.
                owner = reconciler().kube.get_service(namespace, service)
                owned = any(ref.get("uid") == (owner or {}).get("metadata", {}).get("uid")
                            for ref in meta.get("ownerReferences") or [])
                if owner and owned and not owner["metadata"].get("deletionTimestamp"):
                    reconciler().reconcile(owner, trigger="child-deleted")
            else:
                reconciler().refresh(namespace, service)
        except (TransientError, ApiException) as exc:
            # Event handlers are not retried; the next event or the resync catches up.
            logger.info("status refresh of %s/%s deferred: %s", namespace, service, exc)

    return holder
