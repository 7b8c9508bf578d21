"""The dashboard's clients and reads (the I/O edge; the app caches what these return).

A Kubernetes read that fails comes back as a ``SourceError`` with a message for the page
(a 403 says "permission denied", naming the verb and resource), never a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specd.api import k8s


class SourceError(Exception):
    """A read the page could not make, in words."""


def api_client(kubeconfig: str | None) -> Any:
    from specd.operator.kube import make_api_client

    return make_api_client(kubeconfig)


def list_services(api: Any, namespaces: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every SpeculativeService in ``namespaces`` (or all), as plain dicts."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    custom = client.CustomObjectsApi(api)
    try:
        if not namespaces:
            found: Any = custom.list_cluster_custom_object(
                k8s.GROUP, k8s.VERSION, k8s.PLURAL, _request_timeout=10)
            return list(found["items"])
        items: list[dict[str, Any]] = []
        for namespace in namespaces:
            page: Any = custom.list_namespaced_custom_object(
                k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, _request_timeout=10)
            items += page["items"]
        return items
    except ApiException as exc:
        if exc.status == 403:
            raise SourceError(f"permission denied: list {k8s.PLURAL}.{k8s.GROUP}"
                              f"{' in ' + ', '.join(namespaces) if namespaces else ''}"
                              ) from exc
        raise SourceError(f"the Kubernetes API answered {exc.status}: {exc.reason}") from exc
    except HTTPError as exc:
        raise SourceError(f"the Kubernetes API is unreachable: {type(exc).__name__}") from exc


def prometheus(url: str | None) -> Any:
    if not url:
        return None
    from specd.operator.analysis.provider import PrometheusProvider

    return PrometheusProvider(url, timeout_s=5.0)
