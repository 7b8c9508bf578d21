"""The worker server over real HTTP on 127.0.0.1, in front of the real engine.

One engine (the session's SmolLM2-135M, ngram drafter) is served by three apps on one event
loop in a background thread: ``main`` (roomy), ``small`` (capacity 2: the 429 and
cancellation test), ``fuzz`` (context 48, so fuzzed requests stay short) — and a
``specd serve`` subprocess for SIGTERM.
Outputs are compared with the same engine called in-process, one request at a time.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from specd.api.policy import Policy
from specd.worker.server.background import BackgroundServers, free_port

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(600)]

MODEL = "smollm2-135m"
ROOT = Path(__file__).resolve().parents[1]


def write_policy_atomically(directory: Path, policy_text: str) -> None:
    """Update ``directory/policy.json`` the way the kubelet updates a ConfigMap mount."""
    stamp = f"..{time.time_ns()}"
    (directory / stamp).mkdir()
    (directory / stamp / "policy.json").write_text(policy_text)
    tmp = directory / "..data_tmp"
    tmp.symlink_to(stamp)
    os.replace(tmp, directory / "..data")
    link = directory / "policy.json"
    if not link.is_symlink():
        link.symlink_to("..data/policy.json")


class Served:
    """An engine and its apps on one event loop in a thread (uvicorn on 127.0.0.1)."""

    def __init__(self, target, policy_dir: Path) -> None:
        from specd.worker.engine import Engine, EngineConfig
        from specd.worker.server.app import ServerSettings, create_app
        from specd.worker.server.main import usable_context

        self.registry = CollectorRegistry()
        initial = Policy(mode="plain").model_dump_json()
        write_policy_atomically(policy_dir, initial)
        self.policy_file = policy_dir / "policy.json"
        self.engine = Engine(target, EngineConfig(drafter="ngram", max_slots=64, max_context=512,
                                                  cost_profile="none"),
                             policy=Policy(mode="plain"), registry=self.registry)
        context = usable_context(self.engine, 512)
        main = ServerSettings(model_name=MODEL, max_context=context, capacity=80,
                              policy_file=str(self.policy_file), policy_initial_text=initial,
                              policy_poll_s=0.05, manage_engine=False, revision="r-test")
        small = ServerSettings(model_name=MODEL, max_context=context, capacity=2,
                               manage_engine=False, revision="r-small")
        fuzz = ServerSettings(model_name=MODEL, max_context=48, capacity=8,
                              manage_engine=False, revision="r-fuzz")
        self.apps = {name: create_app(self.engine, target.tokenizer, settings, registry)
                     for name, settings, registry in (
                         ("main", main, self.registry), ("small", small, CollectorRegistry()),
                         ("fuzz", fuzz, CollectorRegistry()))}
        self.background = BackgroundServers(self.apps, engines=[self.engine])
        self.loop = self.background.loop

    def url(self, name: str = "main") -> str:
        return self.background.url(name)

    def in_process(self, prompt_ids: list[int], max_tokens: int, **params) -> tuple[str, list]:
        """The same engine, called in-process (no HTTP): (text, token ids)."""
        from specd.worker.engine import GenerationRequest, SamplingParams

        async def run() -> tuple[str, list]:
            req = GenerationRequest(prompt_token_ids=prompt_ids,
                                    params=SamplingParams(max_tokens=max_tokens, **params))
            text, ids = [], []
            async for event in self.engine.submit(req):
                text.append(event.text)
                ids.extend(event.token_ids)
            return "".join(text), ids

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=300)

    def stop(self) -> None:
        self.background.stop()


@pytest.fixture(scope="module")
def served(target, tmp_path_factory):
    s = Served(target, tmp_path_factory.mktemp("policy"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(served):
    from openai import OpenAI

    return OpenAI(base_url=served.url() + "/v1", api_key="unused", max_retries=0, timeout=300)


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        m = re.match(r"^(\S+?)(\{.*\})?\s+(\S+)$", line)
        if m is None or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def scrape(served, name: str = "main") -> str:
    return httpx.get(served.url(name) + "/metrics", timeout=30).text


def chat_ids(target, text: str) -> list[int]:
    ids = target.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, tokenize=True)
    return list(ids if isinstance(ids, list) else ids["input_ids"])


# ---- endpoints -----------------------------------------------------------------------------


def test_health_ready_models_metrics(served):
    base = served.url()
    assert httpx.get(base + "/healthz").text == "ok"
    ready = httpx.get(base + "/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    models = httpx.get(base + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert httpx.get(base + f"/v1/models/{MODEL}").json() == models["data"][0]
    text = scrape(served)
    for name in ("specd_queue_depth", "specd_running_batch_size", "specd_kv_usage_ratio",
                 "specd_policy_info", "specd_policy_reload_errors_total"):
        assert name in text, name


# ---- the official client gets the engine's greedy text ------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_openai_chat_matches_in_process_engine(served, client, target, stream):
    question = "Name three colours of the rainbow."
    expected, expected_ids = served.in_process(chat_ids(target, question), 24)
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": question}],
                  max_tokens=24, temperature=0)
    if stream:
        chunks = list(client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **kwargs))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        usage = chunks[-1].usage
        assert chunks[-1].choices == []  # the usage chunk comes last, with no choices
    else:
        resp = client.chat.completions.create(**kwargs)
        text, finish, usage = resp.choices[0].message.content, resp.choices[0].finish_reason, resp.usage
    assert text == expected
    assert finish == ("length" if len(expected_ids) == 24 else "stop")
    assert usage.completion_tokens == len(expected_ids)
    assert usage.prompt_tokens == len(chat_ids(target, question))
    spec = usage.model_extra["speculative"]
    assert spec["rounds"] >= 1 and spec["tau"] >= 1.0
    assert set(spec) >= {"rounds", "drafted", "verified", "accepted", "tau"}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_openai_completions_matches_in_process_engine(served, client, target, stream):
    prompt = "The three primary colours are"
    ids = list(target.tokenizer.encode(prompt))
    expected, expected_ids = served.in_process(ids, 16)
    kwargs = dict(model=MODEL, prompt=prompt, max_tokens=16, temperature=0)
    if stream:
        chunks = list(client.completions.create(stream=True, **kwargs))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert chunks[-1].choices[0].finish_reason in ("length", "stop")
    else:
        resp = client.completions.create(**kwargs)
        text = resp.choices[0].text
        assert resp.usage.completion_tokens == len(expected_ids)
    assert text == expected and len(text) > 0


def test_stop_strings_and_seeded_sampling(served, client):
    base = dict(model=MODEL, prompt="Count: 1, 2, 3, 4, 5,", max_tokens=24)
    stopped = client.completions.create(temperature=0, stop=[" 8"], **base)
    assert stopped.choices[0].finish_reason == "stop"
    assert " 8" not in stopped.choices[0].text and stopped.choices[0].text.strip()
    a = client.completions.create(temperature=0.9, top_p=0.95, seed=7, extra_body={"top_k": 40}, **base)
    b = client.completions.create(temperature=0.9, top_p=0.95, seed=7, extra_body={"top_k": 40}, **base)
    assert a.choices[0].text == b.choices[0].text  # a seed makes sampling reproducible


def test_seeded_sampling_reproduces_under_load_and_any_policy(served, client):
    """The issue's report: a seeded T=1.0 completion sent twice gave two texts sharing only a
    prefix. Now: alone under plain decoding, and under a drafting policy beside 6 unseeded
    requests, the same text."""
    body = dict(model=MODEL, prompt="Once upon a time, in a small village,", max_tokens=24,
                temperature=1.0, seed=1234)
    alone = client.completions.create(**body).choices[0].text

    def noise(i: int) -> str:
        r = httpx.post(served.url() + COMP, timeout=300, json={
            "model": MODEL, "prompt": f"Tell me about the number {i}.", "max_tokens": 16,
            "temperature": 1.0})
        return r.json()["choices"][0]["text"]

    new = Policy(mode="fixed", k_max=3, fixed_length=3)
    write_policy_atomically(served.policy_file.parent, new.model_dump_json())
    try:
        deadline = time.time() + 30
        while served.engine.stats().policy_version != new.version():
            assert time.time() < deadline, "policy was not reloaded"
            time.sleep(0.02)
        with ThreadPoolExecutor(7) as pool:
            others = [pool.submit(noise, i) for i in range(6)]
            loaded = pool.submit(lambda: client.completions.create(**body)).result()
            assert all(f.result() is not None for f in others)
        again = client.completions.create(**body)
    finally:
        write_policy_atomically(served.policy_file.parent, Policy(mode="plain").model_dump_json())
        deadline = time.time() + 30
        while served.engine.stats().policy_mode != "plain" and time.time() < deadline:
            time.sleep(0.02)
    assert loaded.choices[0].text == alone and again.choices[0].text == alone
    assert loaded.usage.model_extra["speculative"]["drafted"] > 0  # really speculated


# ---- the OpenAI API gaps a client trips on (issue 27) --------------------------------------


def test_models_retrieve(client):
    import openai

    card = client.models.retrieve(MODEL)
    assert card.id == MODEL and card.object == "model" and card.owned_by == "specd"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-9")
    assert err.value.body["param"] == "model" and err.value.body["code"] == "model_not_found"


def test_stream_options_without_stream_is_400(client):
    import openai

    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2, stream=False,
                                       stream_options={"include_usage": True})
    assert err.value.body["param"] == "stream_options"
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt="a", max_tokens=2,
                                  stream_options={"include_usage": True})
    assert err.value.body["param"] == "stream_options"
    # with stream: true it is what it was
    chunks = list(client.completions.create(model=MODEL, prompt="a", max_tokens=2, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[-1].usage.completion_tokens >= 1


def test_chat_message_without_content_is_400(client):
    import openai

    for messages in ([{"role": "user"}], [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": None}]):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
        i = len(messages) - 1
        assert err.value.body["param"] == f"messages[{i}].content"
        assert f"messages[{i}].content" in err.value.body["message"]
        assert err.value.body["code"] == "missing_required_parameter"
    # an empty string is content
    resp = client.chat.completions.create(model=MODEL, max_tokens=2, temperature=0,
                                          messages=[{"role": "user", "content": ""}])
    assert resp.choices[0].finish_reason in ("stop", "length")


# ---- 64 concurrent streams ----------------------------------------------------------------


def test_64_concurrent_streams_each_match_their_single_output(served, target):
    n, max_tokens = 64, 8
    questions = [f"Give one word that rhymes with the number {i}." for i in range(n)]
    expected = [served.in_process(chat_ids(target, q), max_tokens)[0] for q in questions]

    def one(i: int) -> tuple[str, int, bool]:
        body = {"model": MODEL, "messages": [{"role": "user", "content": questions[i]}],
                "max_tokens": max_tokens, "temperature": 0, "stream": True}
        text, chunks, done = [], 0, False
        with httpx.stream("POST", served.url() + "/v1/chat/completions", json=body,
                          timeout=300) as r:
            assert r.status_code == 200, r.read()
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    continue
                chunk = json.loads(line[6:])
                assert chunk["id"].startswith("chatcmpl-")
                chunks += 1
                text.append(chunk["choices"][0]["delta"].get("content") or "")
        return "".join(text), chunks, done

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(one, range(n)))
    assert all(done for _, _, done in results)
    mismatched = [i for i, (text, _, _) in enumerate(results) if text != expected[i]]
    assert mismatched == [], [(results[i][0], expected[i]) for i in mismatched[:3]]


# ---- bad requests -------------------------------------------------------------------------

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]

BAD_REQUESTS = [
    # (name, path, body (dict, or raw str), headers, status, param or code in the answer)
    ("malformed json", CHAT, '{"model": "smollm2-135m", "messages": [', None, 400, "invalid_json"),
    ("not an object", CHAT, '"hello"', None, 422, None),
    ("empty body", COMP, "", None, 422, None),
    ("missing model", CHAT, {"messages": MSG}, None, 422, "model"),
    ("missing messages", CHAT, {"model": MODEL}, None, 422, "messages"),
    ("missing prompt", COMP, {"model": MODEL}, None, 422, "prompt"),
    ("unknown model", CHAT, {"model": "gpt-9", "messages": MSG}, None, 404, "model"),
    ("max_tokens string", COMP, {"model": MODEL, "prompt": "a", "max_tokens": "5"}, None, 422,
     "max_tokens"),
    ("max_tokens zero", COMP, {"model": MODEL, "prompt": "a", "max_tokens": 0}, None, 422,
     "max_tokens"),
    ("max_tokens negative", CHAT, {"model": MODEL, "messages": MSG, "max_tokens": -3}, None,
     422, "max_tokens"),
    ("temperature too high", CHAT, {"model": MODEL, "messages": MSG, "temperature": 7}, None,
     422, "temperature"),
    ("top_p zero", COMP, {"model": MODEL, "prompt": "a", "top_p": 0}, None, 422, "top_p"),
    ("stream not bool", COMP, {"model": MODEL, "prompt": "a", "stream": "yes"}, None, 422,
     "stream"),
    ("bad role", CHAT, {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]},
     None, 422, "messages"),
    ("empty messages", CHAT, {"model": MODEL, "messages": []}, None, 422, "messages"),
    ("too many stops", COMP, {"model": MODEL, "prompt": "a", "stop": ["1", "2", "3", "4", "5"]},
     None, 422, None),
    ("n > 1", CHAT, {"model": MODEL, "messages": MSG, "n": 3}, None, 400, "n"),
    ("logprobs", COMP, {"model": MODEL, "prompt": "a", "logprobs": 2}, None, 400, "logprobs"),
    ("chat logprobs", CHAT, {"model": MODEL, "messages": MSG, "logprobs": True}, None, 400,
     "logprobs"),
    ("tools", CHAT, {"model": MODEL, "messages": MSG, "tools": [{"type": "function"}]}, None,
     400, "tools"),
    ("penalty", COMP, {"model": MODEL, "prompt": "a", "presence_penalty": 1.0}, None, 400,
     "presence_penalty"),
    ("beyond context", COMP, {"model": MODEL, "prompt": "a", "max_tokens": 100000}, None, 400,
     "context_length_exceeded"),
    ("token id out of vocab", COMP, {"model": MODEL, "prompt": [5, 999999]}, None, 400,
     "prompt"),
    ("batched prompts", COMP, {"model": MODEL, "prompt": ["a", "b"]}, None, 400, "prompt"),
    ("stream_options without stream", COMP, {"model": MODEL, "prompt": "a",
                                             "stream_options": {"include_usage": True}},
     None, 400, "stream_options"),
    ("message without content", CHAT, {"model": MODEL, "messages": [{"role": "user"}]}, None,
     400, "messages[0].content"),
    ("unknown model card", "/v1/models/gpt-9", None, None, 404, "model_not_found"),
    ("empty prompt", COMP, {"model": MODEL, "prompt": ""}, None, 400, "prompt"),
    ("unknown path", "/v1/embeddings", {"model": MODEL, "input": "a"}, None, 404, None),
    ("wrong method", "/v1/models", None, None, 405, None),
]


def test_bad_requests_get_the_right_4xx_and_the_server_keeps_serving(served, client):
    assert len(BAD_REQUESTS) >= 20
    base = served.url()
    before = metric_value(scrape(served), "specd_requests_total", outcome="rejected")
    wrong = []
    for name, path, body, headers, status, marker in BAD_REQUESTS:
        if body is None and path.startswith("/v1/models/"):
            r = httpx.get(base + path, timeout=30)
        elif body is None:
            r = httpx.post(base + path, timeout=30)
        elif isinstance(body, str):
            r = httpx.post(base + path, content=body, timeout=30,
                           headers={"Content-Type": "application/json", **(headers or {})})
        else:
            r = httpx.post(base + path, json=body, headers=headers, timeout=30)
        error = r.json().get("error", {}) if r.headers.get("content-type", "").startswith(
            "application/json") else {}
        ok = (r.status_code == status and error.get("message")
              and (marker is None or marker in (error.get("param"), error.get("code"))))
        if not ok:
            wrong.append((name, r.status_code, r.text[:200]))
    assert wrong == []
    after = metric_value(scrape(served), "specd_requests_total", outcome="rejected")
    assert after - before >= 20  # refusals are counted
    beyond = httpx.post(base + COMP, json={"model": MODEL, "prompt": "a", "max_tokens": 100000})
    assert "maximum context length" in beyond.json()["error"]["message"]
    resp = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4, temperature=0)
    assert resp.choices[0].message.content  # still serving


# ---- policy hot-reload --------------------------------------------------------------------


def test_policy_reload_mid_stream_changes_later_rounds(served, target):
    prompt = "1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4,"
    ids = list(target.tokenizer.encode(prompt))
    expected, _ = served.in_process(ids, 64)  # under the plain policy: no drafting
    assert served.engine.stats().policy_mode == "plain"
    old_version = Policy(mode="plain").version()
    new = Policy(mode="fixed", k_max=4, fixed_length=4)
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 64, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    text, usage, swapped = [], None, False
    try:
        with httpx.stream("POST", served.url() + COMP, json=body, timeout=300) as r:
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk["choices"]:
                    text.append(chunk["choices"][0]["text"])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if not swapped:  # after the first chunk, the ConfigMap changes
                    swapped = True
                    write_policy_atomically(served.policy_file.parent, new.model_dump_json())
                    deadline = time.time() + 30
                    while served.engine.stats().policy_version != new.version():
                        assert time.time() < deadline, "policy was not reloaded"
                        time.sleep(0.02)
        assert "".join(text) == expected  # lossless across the switch, stream intact
        spec = usage["speculative"]
        assert spec["drafted"] > 0 and spec["verified"] > 0  # later rounds speculated
        assert spec["rounds"] < usage["completion_tokens"]  # some rounds committed > 1 token
        metrics = scrape(served)
        assert metric_value(metrics, "specd_policy_info", policy_version=new.version()) == 1
        assert metric_value(metrics, "specd_policy_info", policy_version=old_version) == 0
    finally:
        write_policy_atomically(served.policy_file.parent, Policy(mode="plain").model_dump_json())
        deadline = time.time() + 30
        while served.engine.stats().policy_mode != "plain" and time.time() < deadline:
            time.sleep(0.02)


def test_refused_policy_keeps_the_old_one(served, client):
    version = served.engine.stats().policy_version
    errors = metric_value(scrape(served), "specd_policy_reload_errors_total")
    write_policy_atomically(served.policy_file.parent,
                            json.dumps({"mode": "fixed", "k_max": 2, "fixed_length": 9}))
    deadline = time.time() + 30
    while metric_value(scrape(served), "specd_policy_reload_errors_total") == errors:
        assert time.time() < deadline, "the refusal was not counted"
        time.sleep(0.05)
    time.sleep(0.2)  # more polls: counted once per bad document, not per poll
    assert metric_value(scrape(served), "specd_policy_reload_errors_total") == errors + 1
    assert served.engine.stats().policy_version == version
    resp = client.completions.create(model=MODEL, prompt="Hello", max_tokens=3, temperature=0)
    assert resp.choices[0].text
    write_policy_atomically(served.policy_file.parent, Policy(mode="plain").model_dump_json())


# ---- capacity: 429, cancellation ----------------------------------------------------------


class OpenStream:
    """A streaming completion that has produced its first chunk (so it is in the engine)."""

    PROMPT = "Here is a long list of numbers: 1, 2, 3, 4, 5,"

    def __init__(self, base: str, max_tokens: int = 200) -> None:
        self.http = httpx.Client(timeout=120)
        body = {"model": MODEL, "prompt": self.PROMPT, "max_tokens": max_tokens,
                "temperature": 0, "stream": True}
        self.resp = self.http.send(self.http.build_request("POST", base + COMP, json=body),
                                   stream=True)
        assert self.resp.status_code == 200, self.resp.read()
        self.lines = self.resp.iter_lines()
        self.first = next(self.lines)
        assert self.first.startswith("data: {")

    def rest(self) -> list[str]:
        """Read to the end: every ``data:`` line, the first one included."""
        lines = [self.first, *(x for x in self.lines if x.startswith("data: "))]
        self.close()
        return lines

    def close(self) -> None:
        self.resp.close()
        self.http.close()


def test_full_admission_gets_429_and_cancellation_frees_capacity(served):
    url = served.url("small")
    cancelled_before = metric_value(scrape(served, "small"), "specd_requests_total",
                                    outcome="cancelled")
    streams = [OpenStream(url) for _ in range(2)]
    refused = httpx.post(url + COMP, json={"model": MODEL, "prompt": "x", "max_tokens": 2})
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"]["code"] == "queue_full"
    for stream in streams:  # the clients go away mid-stream
        stream.close()
    deadline = time.time() + 30
    while True:
        text = scrape(served, "small")
        cancelled = metric_value(text, "specd_requests_total", outcome="cancelled")
        running = metric_value(text, "specd_running_batch_size")
        if cancelled - cancelled_before == 2 and running == 0:
            break
        assert time.time() < deadline, (cancelled, running)
        time.sleep(0.05)
    assert metric_value(text, "specd_kv_usage_ratio") == 0.0  # their cache is freed
    ok = httpx.post(url + COMP, json={"model": MODEL, "prompt": "x", "max_tokens": 2})
    assert ok.status_code == 200  # capacity is back


def test_non_streamed_request_is_cancelled_when_the_client_leaves(served):
    url = served.url("small")
    before = metric_value(scrape(served, "small"), "specd_requests_total", outcome="cancelled")
    body = json.dumps({"model": MODEL, "prompt": OpenStream.PROMPT, "max_tokens": 400,
                       "temperature": 0}).encode()
    sock = socket.create_connection(("127.0.0.1", served.background.ports["small"]))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    deadline = time.time() + 60
    while metric_value(scrape(served, "small"), "specd_running_batch_size") < 1:
        assert time.time() < deadline, "the request never started"
        time.sleep(0.05)
    sock.close()  # gone before the answer
    while True:
        text = scrape(served, "small")
        if (metric_value(text, "specd_requests_total", outcome="cancelled") == before + 1
                and metric_value(text, "specd_running_batch_size") == 0):
            break
        assert time.time() < deadline, "the abandoned request kept running"
        time.sleep(0.05)
    assert httpx.post(url + COMP, json={"model": MODEL, "prompt": "x", "max_tokens": 2}
                      ).status_code == 200


def test_task_group_labels_latency(served, client):
    before = metric_value(scrape(served), "specd_request_latency_seconds_count",
                          task_group="code")
    client.completions.create(model=MODEL, prompt="def add(a, b):", max_tokens=3,
                              temperature=0, extra_headers={"X-Specd-Task-Group": "Code"})
    client.completions.create(model=MODEL, prompt="x", max_tokens=2, temperature=0,
                              extra_body={"metadata": {"task_group": "code"}})
    client.completions.create(model=MODEL, prompt="x", max_tokens=2, temperature=0,
                              extra_body={"metadata": {"task_group": "poetry"}})
    text = scrape(served)
    assert metric_value(text, "specd_request_latency_seconds_count", task_group="code") == before + 2
    assert metric_value(text, "specd_request_latency_seconds_count", task_group="poetry") == 0
    assert metric_value(text, "specd_request_latency_seconds_count", task_group="other") >= 1


# ---- schema fuzz --------------------------------------------------------------------------


def _with_served_model(case):
    if isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = MODEL
    return case


def test_openapi_fuzz_finds_no_server_error(served):
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.generation.modes import GenerationMode

    base = served.url("fuzz")
    schema = schemathesis.openapi.from_url(base + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {COMP, CHAT, "/v1/models"}
    statuses: dict[int, int] = {}
    for op in operations:
        examples = 30 if op.method.upper() == "POST" else 5
        # valid documents mostly name the served model, so generation itself gets fuzzed
        strategy = (op.as_strategy(GenerationMode.POSITIVE).map(_with_served_model)
                    | op.as_strategy(GenerationMode.POSITIVE)
                    | op.as_strategy(GenerationMode.NEGATIVE))

        @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def check(case) -> None:
            response = case.call_and_validate(base_url=base, checks=[not_a_server_error],
                                              timeout=120)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

        check()
    print("fuzz statuses:", statuses)
    assert statuses and max(statuses) < 500, statuses
    assert httpx.get(base + "/healthz").text == "ok"


# ---- SIGTERM drains -----------------------------------------------------------------------


def test_sigterm_drains_in_flight_and_exits_zero(tmp_path):
    port = free_port()
    env = {**os.environ, "SPECD_PORT": str(port), "SPECD_DRAFTER": "ngram",
           "SPECD_COST_PROFILE": "none", "SPECD_GRACE_PERIOD": "60", "SPECD_MAX_CONTEXT": "256"}
    proc = subprocess.Popen([sys.executable, "-m", "specd.cli", "serve"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 240
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(base + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.time() < deadline, "specd serve did not become ready"
            time.sleep(0.5)
        streams = [OpenStream(base, max_tokens=24) for _ in range(3)]
        proc.send_signal(signal.SIGTERM)
        results = []
        for stream in streams:
            lines = stream.rest()
            finishes = [json.loads(x[6:])["choices"][0]["finish_reason"] for x in lines
                        if x.startswith("data: {")]
            results.append((lines[-1], finishes[-1]))
        assert all(last == "data: [DONE]" and finish in ("length", "stop")
                   for last, finish in results), results
        refused = False
        try:
            r = httpx.post(base + COMP, json={"model": MODEL, "prompt": "x"}, timeout=5)
            refused = r.status_code == 503
        except httpx.TransportError:
            refused = True  # the listening socket is closed
        assert refused
        assert proc.wait(timeout=60) == 0
        log = proc.stdout.read()
        assert "draining in-flight requests" in log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
