"""Which API failures are retried (with backoff) and which surface as Degraded."""

from __future__ import annotations

import json

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from specd.operator.handlers import backoff
from specd.operator.kube import TransientError, classify
from specd.operator.status import ConfigError


def api_error(status: int, message: str = "boom") -> ApiException:
    exc = ApiException(status=status, reason="Reason")
    exc.body = json.dumps({"kind": "Status", "message": message})
    return exc


@pytest.mark.parametrize("status", [409, 429, 500, 503, 504])
def test_overload_conflicts_and_server_errors_are_transient(status: int) -> None:
    assert isinstance(classify(api_error(status)), TransientError)


@pytest.mark.parametrize("status, reason", [(400, "ApplyRejected"), (422, "ApplyRejected"),
                                            (403, "Forbidden")])
def test_rejections_are_configuration_errors(status: int, reason: str) -> None:
    problem = classify(api_error(status, 'Deployment.apps "x" is invalid: spec.replicas'))
    assert problem == ConfigError(reason, 'Deployment.apps "x" is invalid: spec.replicas')


def test_network_failures_are_transient() -> None:
    assert isinstance(classify(urllib3.exceptions.ProtocolError("reset")), TransientError)
    assert isinstance(classify(ConnectionRefusedError()), TransientError)


def test_unknown_errors_propagate() -> None:
    with pytest.raises(KeyError):
        classify(KeyError("bug"))


def test_backoff_grows_and_is_capped() -> None:
    delays = [backoff(r) for r in range(10)]
    assert 0.8 <= delays[0] <= 1.2
    assert all(d <= 60 * 1.2 for d in delays)
    assert min(delays[6:]) >= 48  # capped at 60 s (+-20 % jitter)
    assert delays[3] > delays[0]
