"""Pure parts of the local-cluster tooling: generated go.mod, version stamps, manifests."""

from __future__ import annotations

from pathlib import Path

import yaml

from specd_dev.cluster import build, control_plane, pki, versions

UPSTREAM_GO_MOD = """module k8s.io/kubernetes

go 1.24.0

require (
\tk8s.io/api v0.0.0
\tgithub.com/spf13/cobra v1.9.1
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/code-generator => ./staging/src/k8s.io/code-generator
)
"""


def test_wrapper_go_mod_replaces_each_staging_module_with_published_twin():
    text = build.kubernetes_wrapper_go_mod(UPSTREAM_GO_MOD, "v1.34.4")
    assert "go 1.24.0" in text
    assert "require k8s.io/kubernetes v1.34.4" in text
    for module in ("k8s.io/api", "k8s.io/client-go", "k8s.io/code-generator"):
        assert f"\t{module} => {module} v0.34.4" in text
    assert "cobra" not in text  # only staging modules are replaced


def test_version_ldflags_stamp_both_version_packages():
    flags = build.kubernetes_ldflags("v1.34.4")
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {package}.gitVersion=v1.34.4" in flags
        assert f"-X {package}.gitMajor=1" in flags and f"-X {package}.gitMinor=34" in flags
    assert flags.startswith("-s -w")


def test_cache_key_names_kubernetes_version():
    assert versions.cache_key().startswith(f"k8s-{versions.KUBERNETES}-")
    assert versions.staging_version("v1.34.4") == "v0.34.4"


def test_fake_node_advertises_gpus_and_is_managed_by_kwok():
    node = control_plane.fake_node("n0", control_plane.NodeShape(gpus=4))
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node["status"]["capacity"] == node["status"]["allocatable"]
    assert not node["spec"].get("taints")  # workloads need no kwok toleration


def test_every_component_listens_on_loopback_only(tmp_path: Path):
    keys = pki.generate(tmp_path)
    ports = control_plane.Ports(1, 2, 3, 4, 5, 6, 7, 8, 9)
    kubeconfig = tmp_path / "kubeconfig"
    argv = [
        *control_plane.etcd_args(tmp_path, ports),
        *control_plane.apiserver_args(keys, ports),
        *control_plane.controller_manager_args(keys, kubeconfig, ports),
        *control_plane.scheduler_args(kubeconfig, ports),
        *control_plane.kwok_args(kubeconfig, tmp_path / "s.yaml", ports),
    ]
    flags = [a.split("=", 1) for a in argv]
    addresses = [value for flag, value in flags
                 if "listen" in flag or flag in ("--bind-address", "--server-address")]
    assert len(addresses) == 6 and all("127.0.0.1" in a for a in addresses)
    assert not any(a.startswith("--advertise-address") for a in argv)
    # the add-ons: HAProxy binds loopback only, Prometheus listens on loopback
    plan = dict(control_plane.addon_plan(tmp_path, ports))
    assert set(plan) == set(control_plane.ADDONS)
    assert "--web.listen-address=127.0.0.1:8" in plan["prometheus"]
    haproxy = (tmp_path / "addons" / "haproxy.cfg").read_text()
    binds = [line.split()[1] for line in haproxy.splitlines() if line.strip().startswith("bind")]
    assert binds == ["127.0.0.1:7"]
    assert "--health-port=9" in plan["pod-runner"]


def test_kubeconfig_embeds_credentials_for_loopback_server(tmp_path: Path):
    keys = pki.generate(tmp_path)
    config = yaml.safe_load(control_plane.kubeconfig_yaml(keys, "https://127.0.0.1:6443", "x"))
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert config["users"][0]["user"]["client-key-data"]
    assert (tmp_path / "admin.key").stat().st_mode & 0o777 == 0o600
