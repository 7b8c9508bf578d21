"""Thin I/O edge: the few Kubernetes API calls the operator core makes.

Children are written with server-side apply (field manager ``specd-operator``, forced), so
re-applying is idempotent and conflict-safe: a restarted operator re-applies the same
objects under the same deterministic names and never creates duplicates. Status is written
with a JSON merge patch on the status subresource.
"""

from __future__ import annotations

import json
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from specd.api import k8s
from specd.operator.manifests import FIELD_MANAGER, Manifest, selector_labels
from specd.operator.status import ConfigError

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
REQUEST_TIMEOUT = (5, 30)  # connect, read (seconds)


def make_api_client(kubeconfig: str | None, pool: int = 10) -> client.ApiClient:
    """A client from ``kubeconfig``, else in-cluster, else ~/.kube/config (the operator and
    the dashboard both)."""
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = pool
    configuration.retries = 3  # urllib3 retries on connection errors
    return client.ApiClient(configuration)


class TransientError(Exception):
    """An API failure worth retrying with backoff (overload, conflicts, network)."""


def classify(exc: Exception) -> Exception:
    """Map an API failure to TransientError (retry) or ConfigError (surface as Degraded)."""
    if isinstance(exc, ApiException):
        code = exc.status or 0
        if code in (409, 429) or code >= 500 or code == 0:
            return TransientError(f"API {code}: {exc.reason}")
        message = _api_message(exc)
        if code == 403:
            return ConfigError("Forbidden", message)
        return ConfigError("ApplyRejected", message)
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError | TimeoutError):
        return TransientError(f"{type(exc).__name__}: {exc}")
    raise exc


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message", exc.reason))
    except (TypeError, ValueError, AttributeError):
        return f"{exc.status} {exc.reason}"


def _json(response: Any) -> Any:
    return json.loads(response.data)


def _items(method: Any, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    """One namespaced list call by label selector, as plain dicts."""
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    response = method(namespace, label_selector=selector, _preload_content=False,
                      _request_timeout=REQUEST_TIMEOUT)
    return list(_json(response).get("items", []))


class Kube:
    """The operator's API calls, each one request, raising the client's exceptions."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.networking = client.NetworkingV1Api(api_client)

    def apply(self, manifest: Manifest) -> dict[str, Any]:
        """Server-side apply one child; creates it when absent."""
        meta = manifest["metadata"]
        method = {
            "Deployment": self.apps.patch_namespaced_deployment,
            "ConfigMap": self.core.patch_namespaced_config_map,
            "Service": self.core.patch_namespaced_service,
            "NetworkPolicy": self.networking.patch_namespaced_network_policy,
        }[manifest["kind"]]
        response = method(meta["name"], meta["namespace"], manifest,
                          field_manager=FIELD_MANAGER, force=True, _content_type=APPLY,
                          _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        return _json(response)

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        """Replicas only, a merge patch (the stable track mid-rollout keeps its template as
        it is; the next server-side apply of the whole Deployment takes the field back)."""
        self.apps.patch_namespaced_deployment(
            name, namespace, {"spec": {"replicas": replicas}}, field_manager=FIELD_MANAGER,
            _content_type=MERGE, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)

    def get_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            response = self.custom.get_namespaced_custom_object(
                k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, name,
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _json(response)

    def list_deployments(self, namespace: str, service: str) -> list[dict[str, Any]]:
        return _items(self.apps.list_namespaced_deployment, namespace, selector_labels(service))

    def list_configmaps(self, namespace: str, service: str) -> list[dict[str, Any]]:
        """The service's policy ConfigMaps (what policy each track runs)."""
        return _items(self.core.list_namespaced_config_map, namespace, selector_labels(service))

    def list_pods(self, namespace: str, service: str, track: str) -> list[dict[str, Any]]:
        """One track's pods (the lossless probes pick a Ready one)."""
        return _items(self.core.list_namespaced_pod, namespace, selector_labels(service, track))

    def patch_status(self, namespace: str, name: str, status: dict[str, Any],
                     resource_version: str | None = None) -> None:
        """Merge-patch ``.status``; with ``resource_version`` it fails with 409 when the
        object changed since it was read (optimistic concurrency between writers)."""
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        self.custom.patch_namespaced_custom_object_status(
            k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, name, body,
            _content_type=MERGE, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
