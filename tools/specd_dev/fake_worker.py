"""A tiny fake OpenAI-compatible worker for the pilot's tests (stdlib only, no model).

It streams ``w000 w001 ...`` at ``token_s`` seconds a token (times ``1 + slowdown x
in-flight requests``), honours ``stop``, counts cancelled streams, answers
``/specd/v1/probe``, ``/v1/models``, ``/readyz`` and ``/metrics`` (specd's counter names,
``rounds_per_token`` rounds per token), and can be killed mid-run: ``kill()`` closes the
listening socket and drops every open stream, as a crashed server would.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeWorker:
    def __init__(self, token_s: float = 0.002, slowdown: float = 0.0, tokens_per_round: int = 1,
                 drafter: str = "none", die_after: int | None = None, model: str = "fake") -> None:
        self.token_s = token_s
        self.slowdown = slowdown
        self.tokens_per_round = tokens_per_round
        self.drafter = drafter
        self.die_after = die_after
        self.model = model
        self.lock = threading.Lock()
        self.counters: dict[str, float] = {"rounds": 0, "emitted": 0, "drafted": 0,
                                           "verified": 0, "accepted": 0, "draft_s": 0.0,
                                           "verify_s": 0.0, "schedule_s": 0.0, "commit_s": 0.0}
        self.outcomes: dict[str, int] = {}
        self.in_flight = 0
        self.chat_requests = 0
        self.dead = False
        worker = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, code: int, body: Any) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": worker.model}]})
                elif self.path == "/readyz":
                    self._json(200, {"ready": True})
                elif self.path == "/metrics":
                    raw = worker.metrics_text().encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/specd/v1/probe":
                    self._json(200, {"revision": "t", "track": "stable", "drafter": worker.drafter,
                                     "policy_version": "x", "dtype": "float32",
                                     "results": [worker.probe(p, body["max_tokens"])
                                                 for p in body["prompts"]]})
                    return
                if self.path != "/v1/chat/completions":
                    self._json(404, {"error": {"message": "not found"}})
                    return
                worker.chat(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # ---- behaviour ------------------------------------------------------------------------

    @staticmethod
    def words(messages: list[dict[str, str]], n: int) -> list[str]:
        seed = sum(ord(c) for m in messages for c in m["content"]) % 500
        return [f"w{(seed + i) % 1000:03d} " for i in range(n)]

    def probe(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        ids = [(sum(map(ord, prompt)) + i) % 1000 for i in range(max_tokens)]
        return {"prompt_tokens": len(prompt) // 4, "token_ids": ids, "tokens": [str(i) for i in ids],
                "finish_reason": "length", "top1": ids, "top2": [i + 1 for i in ids],
                "gap": [1.0] * len(ids)}

    def _count(self, outcome: str, tokens: int, group: str) -> None:
        with self.lock:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
            c = self.counters
            rounds = -(-tokens // self.tokens_per_round)
            c["rounds"] += rounds
            c["emitted"] += tokens
            if self.drafter != "none":
                c["drafted"] += rounds * 3
                c["verified"] += rounds * 3
                c["accepted"] += tokens - rounds
                c["draft_s"] += rounds * self.token_s * 0.2
            c["verify_s"] += rounds * self.token_s * self.tokens_per_round
            c["schedule_s"] += rounds * 0.0001

    def chat(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        with self.lock:
            self.chat_requests += 1
            self.in_flight += 1
            if self.die_after is not None and self.chat_requests > self.die_after:
                self.dead = True
        if self.dead:
            threading.Thread(target=self.kill, daemon=True).start()
            handler.close_connection = True
            with self.lock:
                self.in_flight -= 1
            return
        n = int(body.get("max_tokens") or 16)
        words = self.words(body["messages"], n)
        stop = body.get("stop") or []
        text = "".join(words)
        finish = "length"
        for s in stop:
            at = text.find(s)
            if at >= 0:
                text, finish = text[:at], "stop"
        group = (body.get("metadata") or {}).get("task_group", "other")
        pieces = words
        if finish == "stop":  # the text right up to the stop string, in word pieces
            pieces, acc = [], ""
            for w in words:
                if len(acc) + len(w) > len(text):
                    rest = text[len(acc):]
                    if rest:
                        pieces.append(rest)
                    break
                pieces.append(w)
                acc += w
        sent = 0
        try:
            if not body.get("stream"):
                for _ in pieces:
                    time.sleep(self.token_s * (1 + self.slowdown * self.in_flight))
                handler._json(200, {  # type: ignore[attr-defined]
                    "id": "x", "object": "chat.completion", "model": self.model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": finish}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": len(pieces),
                              "total_tokens": 5 + len(pieces)}})
                self._count("finished", len(pieces), group)
                return
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.end_headers()

            def event(obj: Any) -> None:
                handler.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                handler.wfile.flush()

            event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                "finish_reason": None}]})
            for i, w in enumerate(pieces):
                time.sleep(self.token_s * (1 + self.slowdown * self.in_flight))
                if self.dead:
                    raise ConnectionResetError("killed")
                last = i == len(pieces) - 1
                event({"choices": [{"index": 0, "delta": {"content": w},
                                    "finish_reason": finish if last else None}]})
                sent += 1
            event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": sent,
                                            "total_tokens": 5 + sent}})
            handler.wfile.write(b"data: [DONE]\n\n")
            handler.wfile.flush()
            self._count("finished", sent, group)
        except (BrokenPipeError, ConnectionResetError):
            self._count("cancelled" if not self.dead else "error", sent, group)
            handler.close_connection = True
        finally:
            with self.lock:
                self.in_flight -= 1

    def metrics_text(self) -> str:
        c = self.counters
        lab = f'drafter="{self.drafter}",policy_mode="x",policy_version="v"'
        lines = [f"specd_rounds_total{{{lab}}} {c['rounds']}"]
        for key, name in (("emitted", "specd_emitted_tokens_total"),
                          ("drafted", "specd_drafted_tokens_total"),
                          ("verified", "specd_verified_tokens_total"),
                          ("accepted", "specd_accepted_tokens_total")):
            lines.append(f'{name}{{{lab},task_group="chat"}} {c[key]}')
        for phase in ("draft", "schedule", "verify", "commit"):
            lines.append(f'specd_round_phase_seconds_sum{{{lab},phase="{phase}"}} '
                         f"{c[phase + '_s']}")
        for outcome, n in self.outcomes.items():
            lines.append(f'specd_requests_total{{outcome="{outcome}",task_group="chat"}} {n}')
        lines.append(f"specd_running_batch_size {max(0, self.in_flight)}")
        return "\n".join(lines) + "\n"

    # ---- life -----------------------------------------------------------------------------

    def start(self) -> FakeWorker:
        self.thread.start()
        return self

    def kill(self) -> None:
        self.dead = True
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeWorker:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        if not self.dead:
            self.kill()
