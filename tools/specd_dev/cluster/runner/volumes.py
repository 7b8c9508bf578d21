"""Volumes as local directories, written the way the kubelet writes them.

ConfigMap, Secret, projected and downward-API volumes use the kubelet's atomic writer
(``AtomicWriter`` in k8s.io/kubernetes/pkg/volume/util): the files live in a timestamped
directory, ``..data`` is a symlink to it, and each visible file is a symlink through
``..data``. An update writes a new timestamped directory, points ``..data_tmp`` at it and
renames that over ``..data`` (one atomic rename), then removes the old directory. A reader
therefore sees the old set of files or the new one, never a mix, and a watcher of the file
sees its symlink target change, exactly as on a node. emptyDir is a plain directory.
"""

from __future__ import annotations

import base64
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from specd_dev.cluster.runner.rules import PodSpecError, field_ref

DATA = "..data"
Files = dict[str, bytes]
TokenSource = Callable[[Mapping[str, Any]], str]  # serviceAccountToken projection -> token


def write_atomic(directory: Path, files: Mapping[str, bytes], mode: int = 0o644) -> bool:
    """Make ``directory`` hold exactly ``files`` (relative paths); False when already so."""
    directory.mkdir(parents=True, exist_ok=True)
    current = directory / DATA
    if current.is_symlink() and _same(current, files):
        return False
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()) + f"{time.time_ns() % 10**9}"
    fresh = directory / stamp
    fresh.mkdir()
    for rel, content in files.items():
        target = fresh / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(mode)
    old = os.readlink(current) if current.is_symlink() else None
    tmp = directory / "..data_tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(stamp)
    os.replace(tmp, current)
    for rel in files:
        top = rel.split("/", 1)[0]
        link = directory / top
        if not link.is_symlink():
            link.symlink_to(f"{DATA}/{top}")
    for entry in directory.iterdir():
        if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in {
                rel.split("/", 1)[0] for rel in files}:
            entry.unlink()
    if old:
        shutil.rmtree(directory / old, ignore_errors=True)
    return True


def _same(current: Path, files: Mapping[str, bytes]) -> bool:
    try:
        present = {str(p.relative_to(current.resolve())) for p in current.resolve().rglob("*")
                   if p.is_file()}
        return present == set(files) and all(
            (current / rel).read_bytes() == content for rel, content in files.items())
    except OSError:
        return False


def _items(data: Mapping[str, bytes], items: list[Mapping[str, Any]] | None, what: str,
           optional: bool) -> Files:
    if not items:
        return dict(data)
    out: Files = {}
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise PodSpecError(f"{what} has no key {item['key']!r}")
        out[item["path"]] = data[item["key"]]
    return out


def configmap_bytes(configmap: Mapping[str, Any]) -> dict[str, bytes]:
    data = {k: v.encode() for k, v in (configmap.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (configmap.get("binaryData") or {}).items()})
    return data


def secret_bytes(secret: Mapping[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def volume_files(pod: Mapping[str, Any], volume: Mapping[str, Any],
                 configmaps: Mapping[str, Mapping[str, Any]],
                 secrets: Mapping[str, Mapping[str, Any]],
                 token: TokenSource) -> Files | None:
    """The files a volume holds now; None for emptyDir and persistentVolumeClaim (a plain
    directory; a claim's outlives the pod). A missing non-optional ConfigMap/Secret is a
    PodSpecError (the kubelet keeps the pod waiting)."""
    if "emptyDir" in volume or "persistentVolumeClaim" in volume:
        return None
    if "configMap" in volume:
        return _source_files("configMap", volume["configMap"], configmaps, configmap_bytes)
    if "secret" in volume:
        ref = {**volume["secret"], "name": volume["secret"].get("secretName", "")}
        return _source_files("secret", ref, secrets, secret_bytes)
    if "downwardAPI" in volume:
        return _downward(pod, volume["downwardAPI"].get("items", []))
    if "projected" in volume:
        files: Files = {}
        for source in volume["projected"].get("sources", []):
            if "serviceAccountToken" in source:
                projection = source["serviceAccountToken"]
                files[projection["path"]] = token(projection).encode()
            elif "configMap" in source:
                files.update(_source_files("configMap", source["configMap"], configmaps,
                                           configmap_bytes) or {})
            elif "secret" in source:
                files.update(_source_files("secret", source["secret"], secrets,
                                           secret_bytes) or {})
            elif "downwardAPI" in source:
                files.update(_downward(pod, source["downwardAPI"].get("items", [])))
        return files
    kinds = sorted(k for k in volume if k != "name")
    raise PodSpecError(f"volume {volume.get('name')!r}: {kinds} is not supported by the pod runner")


def _source_files(kind: str, ref: Mapping[str, Any], objects: Mapping[str, Mapping[str, Any]],
                  decode: Callable[[Mapping[str, Any]], dict[str, bytes]]) -> Files:
    name, optional = ref.get("name", ""), bool(ref.get("optional"))
    obj = objects.get(name)
    if obj is None:
        if optional:
            return {}
        raise PodSpecError(f"{kind} {name!r} not found")
    return _items(decode(obj), ref.get("items"), f"{kind} {name!r}", optional)


def _downward(pod: Mapping[str, Any], items: list[Mapping[str, Any]]) -> Files:
    files: Files = {}
    for item in items:
        if "fieldRef" not in item:
            raise PodSpecError("downwardAPI: only fieldRef items are supported by the pod runner")
        files[item["path"]] = field_ref(pod, item["fieldRef"]["fieldPath"]).encode()
    return files
