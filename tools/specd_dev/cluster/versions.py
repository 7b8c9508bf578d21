"""Pinned versions of everything the local cluster is built from: the one place to bump them.

Kubernetes 1.34 keeps a supported skew with the kubectl we build from the same module (the
host's kubectl is 1.32, two minors behind, so the suite uses its own).
"""

from __future__ import annotations

import hashlib

KUBERNETES = "v1.34.4"
ETCD = "v3.6.16"
KWOK = "v0.8.0"
HELM = "v3.22.0"

# Module paths (the only place they are spelled).
KUBERNETES_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
KWOK_MODULE = "sigs.k8s.io/kwok"
HELM_MODULE = "helm.sh/helm/v3"

# Binaries the cache holds, all built from the versions above.
KUBERNETES_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
ALL_BINARIES = ("etcd", *KUBERNETES_BINARIES, "kwok", "kwokctl", "helm")


def staging_version(kubernetes: str = KUBERNETES) -> str:
    """k8s.io/kubernetes v1.N.P publishes its staging modules (k8s.io/api, ...) as v0.N.P."""
    return "v0" + kubernetes[2:]


def cache_key() -> str:
    """Name of the cache folder: readable, and changes whenever any pinned version does."""
    pins = f"{KUBERNETES} {ETCD} {KWOK} {HELM} build-1"
    return f"k8s-{KUBERNETES}-" + hashlib.sha256(pins.encode()).hexdigest()[:8]
