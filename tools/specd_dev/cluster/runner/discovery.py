"""Prometheus sees the runner's pods with the labels a real cluster's discovery gives.

The runner writes a file_sd target file with, for each pod and declared container port, the
same ``__meta_kubernetes_pod_*`` labels Prometheus's ``kubernetes_sd_configs`` (role: pod)
attaches; the local scrape job then applies the same relabelling as the production job
(:data:`POD_RELABEL`). The only local difference is the address: on a node Prometheus scrapes
``podIP:port`` and the production job rewrites the port from ``prometheus.io/port``; here
``__address__`` is already the loopback port standing for that container port, so the local
job keeps the target whose container port equals the annotation instead. Series therefore
carry ``namespace``, ``pod``, ``container`` and the pod's labels (``serving_specd_io_track``,
...) and ``track`` / ``revision`` from the pod's specd labels, locally and in production
alike.

Production equivalents (documented in docs/prometheus.md): :func:`production_scrape_config`
and a Prometheus Operator PodMonitor.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

META = "__meta_kubernetes_"
_INVALID = re.compile(r"[^a-zA-Z0-9_]")

# kubernetes_sd (role: pod) relabelling shared by the local job and the production one.
POD_RELABEL: list[dict[str, Any]] = [
    {"source_labels": [f"{META}pod_annotation_prometheus_io_scrape"], "regex": "true",
     "action": "keep"},
    {"source_labels": [f"{META}pod_phase"], "regex": "Pending|Succeeded|Failed|Completed",
     "action": "drop"},
    {"source_labels": [f"{META}pod_annotation_prometheus_io_path"], "regex": "(.+)",
     "target_label": "__metrics_path__"},
    {"action": "labelmap", "regex": f"{META}pod_label_(.+)"},
    {"source_labels": [f"{META}namespace"], "target_label": "namespace"},
    {"source_labels": [f"{META}pod_name"], "target_label": "pod"},
    {"source_labels": [f"{META}pod_container_name"], "target_label": "container"},
    # specd's own: every series of a worker carries its track and revision, the engine's
    # counters too (the server's histograms export the same values themselves: honor_labels)
    {"source_labels": [f"{META}pod_label_serving_specd_io_track"], "target_label": "track"},
    {"source_labels": [f"{META}pod_label_serving_specd_io_revision"],
     "target_label": "revision"},
]
# production: scrape podIP:<prometheus.io/port>
PRODUCTION_ADDRESS = {
    "source_labels": ["__address__", f"{META}pod_annotation_prometheus_io_port"],
    "regex": r"([^:]+)(?::\d+)?;(\d+)", "replacement": "$1:$2", "target_label": "__address__",
}
# local: the target of the annotated container port (its address is already loopback:port)
LOCAL_ADDRESS = {  # keepequal: Prometheus >= 2.41 (Debian bookworm ships 2.42)
    "source_labels": [f"{META}pod_container_port_number"], "action": "keepequal",
    "target_label": f"{META}pod_annotation_prometheus_io_port",
}


def sanitise(name: str) -> str:
    """Prometheus's label-name sanitising for discovered labels (``a.b/c`` -> ``a_b_c``)."""
    return _INVALID.sub("_", name)


def target_groups(pods: Iterable[tuple[Mapping[str, Any], Mapping[int, int], bool]],
                  ) -> list[dict[str, Any]]:
    """file_sd groups for ``(pod with status, container port -> loopback port, ready)``."""
    groups = []
    for pod, ports, ready in pods:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
        common = {
            f"{META}namespace": meta["namespace"],
            f"{META}pod_name": meta["name"],
            f"{META}pod_uid": meta["uid"],
            f"{META}pod_ip": status.get("podIP", ""),
            f"{META}pod_node_name": spec.get("nodeName", ""),
            f"{META}pod_host_ip": status.get("hostIP", ""),
            f"{META}pod_ready": "true" if ready else "false",
            f"{META}pod_phase": status.get("phase", "Running"),
        }
        for key, value in (meta.get("labels") or {}).items():
            common[f"{META}pod_label_{sanitise(key)}"] = value
            common[f"{META}pod_labelpresent_{sanitise(key)}"] = "true"
        for key, value in (meta.get("annotations") or {}).items():
            common[f"{META}pod_annotation_{sanitise(key)}"] = value
            common[f"{META}pod_annotationpresent_{sanitise(key)}"] = "true"
        owners = meta.get("ownerReferences") or []
        if owners:
            common[f"{META}pod_controller_kind"] = owners[0]["kind"]
            common[f"{META}pod_controller_name"] = owners[0]["name"]
        for container in spec.get("containers", []):
            for port in container.get("ports", []):
                number = int(port["containerPort"])
                if number not in ports:
                    continue
                labels = {**common,
                          f"{META}pod_container_name": container["name"],
                          f"{META}pod_container_port_name": port.get("name", ""),
                          f"{META}pod_container_port_number": str(number),
                          f"{META}pod_container_port_protocol": port.get("protocol", "TCP")}
                groups.append({"targets": [f"127.0.0.1:{ports[number]}"], "labels": labels})
    return groups


def targets_json(groups: list[dict[str, Any]]) -> str:
    return json.dumps(groups, indent=1, sort_keys=True) + "\n"


def local_scrape_config(targets_file: str, interval: str = "1s") -> dict[str, Any]:
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval,
                   "evaluation_interval": interval},
        "scrape_configs": [{
            "job_name": "kubernetes-pods",
            "honor_labels": True,
            "file_sd_configs": [{"files": [targets_file], "refresh_interval": "5s"}],
            "relabel_configs": [LOCAL_ADDRESS, *POD_RELABEL],
        }],
    }


def production_scrape_config() -> dict[str, Any]:
    """The plain-Prometheus job that labels series exactly as the local one does."""
    return {"job_name": "kubernetes-pods", "honor_labels": True,
            "kubernetes_sd_configs": [{"role": "pod"}],
            "relabel_configs": [POD_RELABEL[0], POD_RELABEL[1], PRODUCTION_ADDRESS,
                                *POD_RELABEL[2:]]}


def local_config_yaml(targets_file: str, interval: str = "1s") -> str:
    return yaml.safe_dump(local_scrape_config(targets_file, interval), sort_keys=False)
