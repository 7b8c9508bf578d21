"""The server's pure parts: admission, the policy watcher's decisions, request validation,
the ``specd serve`` flags. No model here (the HTTP tests are in test_server_http.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from specd.api import metrics as names
from specd.api.policy import Policy
from specd.worker.server.admission import Admission, retry_after_seconds
from specd.worker.server.metrics import ServerMetrics, registered_names
from specd.worker.server.openai_schema import ChatCompletionRequest, CompletionRequest
from specd.worker.server.policy_watch import PolicyWatcher, decide


def test_admission_bounds_and_releases():
    adm = Admission(capacity=2)
    assert adm.try_admit() and adm.try_admit()
    assert not adm.try_admit()
    adm.release(0.5)
    assert adm.try_admit()
    adm.draining = True
    adm.release()
    assert not adm.try_admit()  # draining refuses even with room


def test_retry_after_is_median_latency_clamped():
    assert retry_after_seconds([]) == 1
    assert retry_after_seconds([0.2, 0.3, 0.1]) == 1
    assert retry_after_seconds([2.2, 9.0, 3.5]) == 4
    assert retry_after_seconds([500.0]) == 60
    with pytest.raises(ValueError):
        Admission(capacity=0)


def test_policy_decide_apply_unchanged_refuse():
    good = Policy(mode="fixed", k_max=4, fixed_length=3).model_dump_json()
    first = decide(good, None)
    assert first.action == "apply" and first.policy is not None
    assert first.policy.fixed_length == 3
    assert decide(good, first.digest).action == "unchanged"
    bad = decide(json.dumps({"mode": "fixed", "k_max": 2, "fixed_length": 5}), first.digest)
    assert bad.action == "refuse" and "fixed_length must be <= k_max" in bad.reason
    typo = decide(json.dumps({"mode": "fast"}), first.digest)
    assert typo.action == "refuse" and "mode" in typo.reason
    assert decide("{not json", first.digest).action == "refuse"


def _configmap_swap(root, text: str, stamp: str) -> None:
    """What the kubelet does: write a new timestamped dir, swap ``..data`` atomically."""
    new = root / f"..{stamp}"
    new.mkdir()
    (new / "policy.json").write_text(text)
    tmp = root / "..data_tmp"
    tmp.symlink_to(new.name)
    os.replace(tmp, root / "..data")
    if not (root / "policy.json").is_symlink():
        (root / "policy.json").symlink_to("..data/policy.json")


def test_watcher_follows_configmap_symlink_swaps(tmp_path):
    applied: list[Policy] = []
    refused: list[str] = []
    v1 = Policy(mode="plain").model_dump_json()
    _configmap_swap(tmp_path, v1, "2026_01")
    w = PolicyWatcher(tmp_path / "policy.json", applied.append, refused.append,
                      initial_text=v1)
    assert w.check_once().action == "unchanged"  # start-up content is not a change
    _configmap_swap(tmp_path, Policy(mode="fixed", fixed_length=2).model_dump_json(), "2026_02")
    assert w.check_once().action == "apply"
    assert [p.mode for p in applied] == ["fixed"]
    _configmap_swap(tmp_path, '{"mode": "scheduled", "min_verify": 9, "max_verify": 2}',
                    "2026_03")
    assert w.check_once().action == "refuse"
    assert w.check_once().action == "unchanged"  # counted once, not once per poll
    assert len(refused) == 1 and "min_verify" in refused[0]
    assert [p.mode for p in applied] == ["fixed"]  # the old policy stayed
    (tmp_path / "..data").unlink()
    assert w.check_once() is None and len(refused) == 2  # unreadable: refused, kept


def test_watcher_reports_engine_refusal(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(Policy().model_dump_json())

    def engine_refuses(policy: Policy) -> None:
        raise ValueError("mode scheduled needs a drafter with confidences")

    refused: list[str] = []
    w = PolicyWatcher(path, engine_refuses, refused.append)
    assert w.check_once().action == "refuse"
    assert "needs a drafter" in refused[0]


@pytest.mark.parametrize("body, fragment", [
    ({"model": "m", "prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ({"model": "m", "prompt": "x", "temperature": "hot"}, "temperature"),
    ({"model": "m", "prompt": "x", "stop": ["a"] * 5}, "at most 4"),
    ({"model": "m", "prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "x"}, "model"),
    ({"model": "m", "prompt": "x", "max_tokens": 0}, "max_tokens"),
])
def test_completion_request_validation(body, fragment):
    with pytest.raises(ValueError) as err:
        CompletionRequest.model_validate(body)
    assert fragment in str(err.value)


def test_unsupported_fields_are_named():
    req = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2,
         "logprobs": True, "tools": [{"type": "function"}]})
    fields = [f for f, _ in req.unsupported_fields()]
    assert fields == ["n", "logprobs", "tools"]
    ok = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                  {"type": "text", "text": "b"}]}],
         "presence_penalty": 0, "max_completion_tokens": 7, "max_tokens": 3})
    assert ok.unsupported_fields() == [] and ok.token_limit() == 7
    assert ok.messages[0].text() == "ab"


def test_invalid_field_combinations_are_named():
    msg = [{"role": "user", "content": "hi"}]
    req = CompletionRequest.model_validate({"model": "m", "prompt": "x",
                                            "stream_options": {"include_usage": True}})
    assert [f for f, _, _ in req.invalid_fields()] == ["stream_options"]
    ok = CompletionRequest.model_validate({"model": "m", "prompt": "x", "stream": True,
                                           "stream_options": {"include_usage": True}})
    assert ok.invalid_fields() == []
    chat = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [*msg, {"role": "assistant"}, {"role": "user", "content": None}]})
    assert [(f, c) for f, _, c in chat.invalid_fields()] == [
        ("messages[1].content", "missing_required_parameter"),
        ("messages[2].content", "missing_required_parameter")]
    tool = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [*msg, {"role": "assistant", "tool_calls": [{"id": "c"}]},
                                    {"role": "user", "content": ""}]})
    assert tool.invalid_fields() == []  # tool calls stand for content; "" is content


def test_server_metrics_leave_engine_owned_names_alone():
    registry = CollectorRegistry()
    engine_requests = Counter(names.REQUESTS, "engine's", ["outcome"], registry=registry)
    assert names.REQUESTS in registered_names(registry)
    m = ServerMetrics(registry, revision="r1", track="canary")
    m.outcome("finished", "chat")  # engine owns it: the server must not double count
    m.reload_error()
    m.timings("code", 2.0, 0.5, 4)
    text = generate_latest(registry).decode()
    assert names.REQUESTS not in m.owned
    assert engine_requests._metrics == {}
    assert 'specd_policy_reload_errors_total{revision="r1",track="canary"} 1.0' in text
    assert 'specd_time_per_output_token_seconds_sum{revision="r1",task_group="code",track="canary"} 0.5' in text


def test_serve_help_documents_flags_and_env():
    out = subprocess.run([sys.executable, "-m", "specd.cli", "serve", "--help"],
                         capture_output=True, text=True, cwd="/", timeout=60,
                         env={**os.environ, "SPECD_PORT": "9123"})
    assert out.returncode == 0, out.stderr
    for flag, env in [("--model", "SPECD_MODEL"), ("--drafter", "SPECD_DRAFTER"),
                      ("--policy-file", "SPECD_POLICY_FILE"), ("--port", "SPECD_PORT"),
                      ("--max-queue", "SPECD_MAX_QUEUE"), ("--grace-period",
                                                           "SPECD_GRACE_PERIOD")]:
        assert flag in out.stdout and env in out.stdout
    assert "(default: 9123)" in out.stdout  # the environment sets the default


def test_serve_bad_env_value_fails_clearly():
    out = subprocess.run([sys.executable, "-m", "specd.cli", "serve"], capture_output=True,
                         text=True, cwd="/", timeout=60, env={**os.environ, "SPECD_PORT": "x"})
    assert out.returncode == 2
    assert "invalid int value: 'x'" in out.stderr


def test_serve_bad_policy_file_fails_clearly(tmp_path):
    bad = tmp_path / "policy.json"
    bad.write_text('{"mode": "sometimes"}')
    out = subprocess.run([sys.executable, "-m", "specd.cli", "serve", "--policy-file", str(bad)],
                         capture_output=True, text=True, cwd="/", timeout=60)
    assert out.returncode == 2
    assert "invalid policy file" in out.stderr and "mode" in out.stderr
