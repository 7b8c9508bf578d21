"""Kubernetes names: the CRD's group/version/kind and the labels on every child object."""

from __future__ import annotations

GROUP = "serving.specd.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SpeculativeService"
PLURAL = "speculativeservices"
SINGULAR = "speculativeservice"
SHORT_NAME = "specsvc"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "specd"
LABEL_SERVICE = f"{GROUP}/service"
LABEL_REVISION = f"{GROUP}/revision"
LABEL_TRACK = f"{GROUP}/track"

TRACKS = ("stable", "canary")

# Where the worker finds its policy inside the pod (the track's ConfigMap is mounted here).
POLICY_MOUNT_DIR = "/etc/specd/policy"
