"""Lossless probes, judged (pure) and their I/O edge against a fake pod lister and a real
HTTP server standing in for a worker's /specd/v1/probe."""

from __future__ import annotations

import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specd.api.spec import ProbeSpec
from specd.operator.analysis import probes
from specd.operator.analysis.probe_client import AddressMap, ProbeClient
from specd.operator.analysis.probes import ProbeAnswer, compare, judge

TIE = 0.1


def answer(tokens: list[int], gaps: list[float] | None = None,
           top2: list[int] | None = None) -> ProbeAnswer:
    """An answer whose tokens are the target's greedy choice (top-1) everywhere."""
    gaps = gaps or [2.0] * len(tokens)
    return ProbeAnswer(tokens, list(tokens), top2 or [t + 1000 for t in tokens], gaps)


def test_identical_outputs_pass() -> None:
    same = answer([1, 2, 3])
    assert compare(0, same, answer([1, 2, 3]), TIE).outcome == "identical"
    result = judge([same, answer([4])], [answer([1, 2, 3]), answer([4])], TIE)
    assert result.verdict == "Successful" and result.metric == probes.METRIC
    assert "2 probes" in result.message


def test_a_divergence_at_a_near_tie_passes_and_is_named() -> None:
    # position 1: the stable's target ranks 2 then 7, the canary's 7 then 2, 0.02 apart
    stable = ProbeAnswer([1, 2, 9], [1, 2, 9], [5, 7, 5], [3.0, 0.02, 3.0])
    canary = ProbeAnswer([1, 7, 4], [1, 7, 4], [5, 2, 5], [3.0, 0.01, 3.0])
    found = compare(3, stable, canary, TIE)
    assert (found.outcome, found.position) == ("near-tie", 1)
    result = judge([stable], [canary], TIE)
    assert result.verdict == "Successful" and "near-tie" in result.message


@pytest.mark.parametrize(("why", "stable", "canary"), [
    # a changed target: each side is sure of its own token
    ("big gaps", ProbeAnswer([1, 2], [1, 2], [5, 7], [3.0, 4.0]),
     ProbeAnswer([1, 7], [1, 7], [5, 2], [3.0, 3.5])),
    # small gap on one side only
    ("one-sided tie", ProbeAnswer([1, 2], [1, 2], [5, 7], [3.0, 0.01]),
     ProbeAnswer([1, 7], [1, 7], [5, 2], [3.0, 3.5])),
    # both gaps small, but the other's token is not the runner-up (a third token)
    ("not the runner-up", ProbeAnswer([1, 2], [1, 2], [5, 8], [3.0, 0.01]),
     ProbeAnswer([1, 7], [1, 7], [5, 2], [3.0, 0.01])),
])
def test_a_real_difference_fails_with_the_position(why, stable, canary) -> None:
    found = compare(0, stable, canary, TIE)
    assert (found.outcome, found.position) == ("different", 1), why
    result = judge([answer([3]), stable], [answer([3]), canary], TIE)
    assert result.verdict == "Failed" and "probe 1" in result.message
    assert "position 1" in result.message and result.value == 0.5


def test_a_canary_that_is_not_its_own_targets_greedy_choice_fails() -> None:
    # a verifier bug: the canary emitted 7 where its own target's best is 2, far apart;
    # the stable track happens to agree, which must not hide it
    stable = ProbeAnswer([1, 7], [1, 7], [5, 2], [3.0, 2.0])
    canary = ProbeAnswer([1, 7], [1, 2], [5, 7], [3.0, 2.0])
    found = compare(0, stable, canary, TIE)
    assert (found.outcome, found.position) == ("inconsistent", 1)
    assert judge([stable], [canary], TIE).verdict == "Failed"
    # ... but not at a near-tie of its own target
    canary_tie = ProbeAnswer([1, 7], [1, 2], [5, 7], [3.0, 0.01])
    assert compare(0, stable, canary_tie, TIE).outcome == "identical"


def test_nothing_to_compare_is_inconclusive() -> None:
    assert judge([], [], TIE).verdict == "Inconclusive"
    assert judge([answer([1])], [], TIE).verdict == "Inconclusive"


def test_address_map_translates_and_follows_the_file(tmp_path) -> None:
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"10.0.0.1:8000": "127.0.0.1:4000"}))
    addresses = AddressMap(path)
    assert addresses.resolve("10.0.0.1", 8000) == "127.0.0.1:4000"
    assert addresses.resolve("10.0.0.2", 8000) == "10.0.0.2:8000"  # not mapped: as is
    path.write_text(json.dumps({"10.0.0.2:8000": "127.0.0.1:4001"}))
    os.utime(path, (1, 1))  # a new mtime even within the same clock tick
    assert addresses.resolve("10.0.0.2", 8000) == "127.0.0.1:4001"
    assert AddressMap(None).resolve("10.0.0.3", 8000) == "10.0.0.3:8000"


class FakePods:
    def __init__(self, pods: dict[str, list[dict]]) -> None:
        self.pods = pods

    def list_pods(self, namespace: str, service: str, track: str) -> list[dict]:
        return self.pods.get(track, [])


def pod(name: str, ip: str, ready: bool = True, port: int = 8000) -> dict:
    return {"metadata": {"name": name},
            "spec": {"containers": [{"ports": [{"name": "http", "containerPort": port}]}]},
            "status": {"podIP": ip, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.fixture
def workers():
    """Two HTTP servers answering /specd/v1/probe: 'stable' and 'canary' (tokens settable)."""
    outputs = {"stable": [1, 2, 3], "canary": [1, 2, 3]}
    servers = {}
    for track in outputs:
        class Handler(BaseHTTPRequestHandler):
            name = track

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                tokens = outputs[self.name]
                result = {"token_ids": tokens, "top1": tokens, "top2": [0] * len(tokens),
                          "gap": [1.0] * len(tokens), "tokens": [str(t) for t in tokens]}
                data = json.dumps({"results": [result] * len(body["prompts"])}).encode()
                self.send_response(200 if self.path == "/specd/v1/probe" else 404)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[track] = server
    yield outputs, {t: f"127.0.0.1:{s.server_address[1]}" for t, s in servers.items()}
    for server in servers.values():
        server.shutdown()


def test_client_probes_one_ready_pod_per_track(workers, tmp_path) -> None:
    outputs, addresses = workers
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"10.1.0.1:8000": addresses["stable"],
                                "10.1.0.2:8000": addresses["canary"]}))
    kube = FakePods({"stable": [pod("s-b", "10.9.9.9", ready=False), pod("s-a", "10.1.0.1")],
                     "canary": [pod("c-a", "10.1.0.2")]})
    client = ProbeClient(kube, AddressMap(path), timeout_s=10)
    spec = ProbeSpec(prompts=["a", "b"])
    ok = client.run(spec, "ns", "svc")
    assert ok.verdict == "Successful", ok.message
    assert "canary c-a vs stable s-a" in ok.message  # the not-Ready pod was skipped
    outputs["canary"] = [1, 5, 3]
    bad = client.run(spec, "ns", "svc")
    assert bad.verdict == "Failed" and "position 1" in bad.message


def test_client_unreachable_pod_is_an_error_and_no_pod_inconclusive(tmp_path) -> None:
    kube = FakePods({"stable": [pod("s", "127.0.0.1")], "canary": []})
    client = ProbeClient(kube, timeout_s=2)
    assert client.run(ProbeSpec(), "ns", "svc").verdict == "Inconclusive"
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    kube.pods["canary"] = [pod("c", "127.0.0.1", port=closed)]
    error = client.run(ProbeSpec(), "ns", "svc")
    assert error.verdict == "Error" and "canary pod c" in error.message
