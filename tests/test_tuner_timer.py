"""The tuner's I/O edge against stand-ins for the API server and Prometheus: an interval runs
only when due, its status write is guarded, a change triggers a reconcile, Prometheus down is
an interval that changes nothing."""

from __future__ import annotations

import copy
import threading

from kubernetes.client.exceptions import ApiException

from specd.operator.analysis.provider import ProviderError
from specd.operator.tuner.signals import Queries
from specd.operator.tuner.timer import Tuner
from tests.test_tuner_loop import vectors

SPEC = {"model": {"reference": "smollm2-135m"}, "worker": {"image": "specd-worker:dev"},
        "drafter": {"method": "semi-ar", "k": 4}, "verification": {"mode": "scheduled"},
        "tuning": {"enabled": True, "interval": "1m"}}


class FakeKube:
    def __init__(self) -> None:
        self.obj = {"metadata": {"namespace": "ns", "name": "svc", "uid": "u",
                                 "resourceVersion": "1", "generation": 1},
                    "spec": copy.deepcopy(SPEC), "status": {}}
        self.writes: list[dict] = []
        self.conflict = False

    def get_service(self, namespace: str, name: str) -> dict:
        return copy.deepcopy(self.obj)

    def patch_status(self, namespace, name, status, resource_version=None) -> None:
        if self.conflict or resource_version != self.obj["metadata"]["resourceVersion"]:
            raise ApiException(status=409)
        self.writes.append(status)
        self.obj["status"].update(copy.deepcopy(status))
        self.obj["metadata"]["resourceVersion"] = str(int(resource_version) + 1)


class FakeProvider:
    def __init__(self, recorded: dict) -> None:
        self.by_query = {q: recorded.get(name, [])
                         for name, q in Queries("ns", "svc", "1m").all().items()}
        self.down = False

    def vector(self, promql: str):
        if self.down:
            raise ProviderError("Prometheus at http://prom unreachable: ConnectTimeout")
        return self.by_query[promql]


def tuner(kube, provider, clock):
    reconciled = []
    locks: dict = {}

    def lock(ns, name):
        return locks.setdefault((ns, name), threading.Lock())

    return Tuner(kube, provider, None, lock, reconciled.append, clock=lambda: clock[0]), \
        reconciled


def test_intervals_run_when_due_and_a_change_reconciles() -> None:
    kube, clock = FakeKube(), [1_800_000_000.0]
    slow = vectors({"code": (600.0, 100.0)})  # code 40 % below the plain reference
    t, reconciled = tuner(kube, FakeProvider(slow), clock)
    first = t.run("ns", "svc")
    assert first is not None and not first.changes and len(kube.writes) == 1
    assert t.run("ns", "svc") is None  # not due again within the interval
    clock[0] += 60
    second = t.run("ns", "svc")
    assert [c.decision.action for c in second.changes] == ["plain"]
    assert kube.obj["status"]["tuning"]["overlay"] == {"code": {"mode": "plain"}}
    tuned = next(c for c in kube.obj["status"]["conditions"] if c["type"] == "Tuned")
    assert tuned["reason"] == "PolicyChanged" and len(reconciled) == 1


def test_prometheus_down_or_a_conflict_changes_nothing() -> None:
    kube, clock = FakeKube(), [1_800_000_000.0]
    provider = FakeProvider(vectors({"code": (600.0, 100.0)}))
    provider.down = True
    t, reconciled = tuner(kube, provider, clock)
    result = t.run("ns", "svc")
    assert result.condition[:2] == (False, "MetricsUnavailable") and not reconciled
    assert "unreachable" in result.condition[2]
    kube.conflict = True
    clock[0] += 60
    assert t.run("ns", "svc") is None and len(kube.writes) == 1  # refused: next tick again
    kube.obj["spec"]["tuning"]["enabled"] = False
    kube.conflict = False
    clock[0] += 60
    assert t.run("ns", "svc") is None  # tuning switched off: nothing runs


def test_min_requests_from_the_spec_decides_what_a_window_may_judge() -> None:
    """12 finished requests an interval: under the default 20 the interval holds (NoData);
    with ``spec.tuning.minRequests: 10`` the same windows send code plain."""
    quiet = vectors({"code": (600.0, 100.0)}, requests=12.0)
    for min_requests, actions in ((None, []), (10, ["plain"])):
        kube, clock = FakeKube(), [1_800_000_000.0]
        if min_requests is not None:
            kube.obj["spec"]["tuning"]["minRequests"] = min_requests
        t, _ = tuner(kube, FakeProvider(quiet), clock)
        first = t.run("ns", "svc")
        clock[0] += 60
        second = t.run("ns", "svc")
        assert [c.decision.action for c in second.changes] == actions
        if min_requests is None:
            assert first.condition[1] == second.condition[1] == "NoData"
            assert "20 requests" in second.condition[2]
