"""Behind `specd serve`: the decode counters by (round kind, batch bucket) over one window of
closed-loop traffic, as the tuner's window reads them (docs/bench/RESULTS.md, 2026-12-04).

    python docs/bench/serve_window_probe.py CONCURRENCY SECONDS MAX_TOKENS PORT

One worker on one thread: semi-ar, fixed K=4, 30 % reference rounds, the count prompt,
greedy; 20 s of warm-up, then the counters' increase over SECONDS. Traffic goes to 127.0.0.1
only and stops with the script.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import httpx

PROMPT = "Count from 1 to 30, separated by commas."
COUNTERS = ("specd_decode_tokens_total{", "specd_decode_seconds_total{")


def scrape(url: str) -> dict[tuple[str, str], float]:
    out = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith(COUNTERS):
            name, labels = line.split("{", 1)
            out[(name, labels.split("}", 1)[0])] = float(line.rsplit(" ", 1)[1])
    return out


def main() -> None:
    concurrency, seconds, max_tokens, port = (int(sys.argv[1]), float(sys.argv[2]),
                                              int(sys.argv[3]), int(sys.argv[4]))
    workdir = tempfile.mkdtemp(prefix="serve-window-")
    policy_file = os.path.join(workdir, "policy.json")
    with open(policy_file, "w") as f:
        json.dump({"mode": "fixed", "k_max": 4, "fixed_length": 4, "plain_rounds": 0.3}, f)
    slots = max(concurrency, 16)
    proc = subprocess.Popen(
        ["specd", "serve", "--model", "smollm2-135m", "--max-context", "512", "--drafter",
         "semi-ar", "--max-slots", str(slots), "--max-queue", str(2 * slots), "--policy-file",
         policy_file, "--port", str(port), "--cost-profile=none"],
        env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(workdir, "serve.log"), "w"))
    url = f"http://127.0.0.1:{port}"
    stop = threading.Event()

    def client() -> None:
        with httpx.Client(timeout=300) as http:
            while not stop.is_set():
                http.post(url + "/v1/chat/completions", headers={"X-Specd-Task-Group": "chat"},
                          json={"model": "smollm2-135m", "max_tokens": max_tokens,
                                "temperature": 0.0,
                                "messages": [{"role": "user", "content": PROMPT}]})
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        for _ in range(concurrency):
            threading.Thread(target=client, daemon=True).start()
        time.sleep(20)
        before = scrape(url)
        time.sleep(seconds)
        after = scrape(url)
    finally:
        stop.set()
        proc.terminate()
        proc.wait(30)
    tokens: dict[tuple[str, str], float] = {}
    secs: dict[tuple[str, str], float] = {}
    for (name, labels), value in after.items():
        lab = {k: v.strip('"') for k, v in (p.split("=", 1) for p in labels.split(","))}
        key = (lab["round_kind"], lab["batch"])
        into = tokens if name.startswith("specd_decode_tokens") else secs
        into[key] = into.get(key, 0.0) + value - before.get((name, labels), 0.0)
    for kind, batch in sorted(tokens):
        t, s = tokens[(kind, batch)], secs.get((kind, batch), 0.0)
        print(f"{kind:12s} batch {batch:>3s}  tokens {t:7.0f}  request-s {s:7.1f}  "
              f"tok/s {t / s if s else 0.0:6.2f}")


if __name__ == "__main__":
    main()
