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
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specd.api import metrics as m
from specd_dev.testing import Traffic

PROMPT = "Count from 1 to 30, separated by commas."


def scrape(url: str) -> dict[tuple[str, str, str], float]:
    """(counter, round kind, batch bucket) -> value, from the worker's /metrics."""
    out: dict[tuple[str, str, str], float] = {}
    text = httpx.get(url + "/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        if family.name not in (m.DECODE_TOKENS, m.DECODE_SECONDS):
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                key = (family.name, sample.labels[m.LABEL_ROUND_KIND],
                       sample.labels[m.LABEL_BATCH])
                out[key] = out.get(key, 0.0) + sample.value
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
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        with Traffic(url, concurrency=concurrency, max_tokens=max_tokens,
                     prompts={"chat": PROMPT}) as traffic:
            time.sleep(20)
            before = scrape(url)
            time.sleep(seconds)
            after = scrape(url)
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"{traffic.sent} requests, {traffic.failed} failed {traffic.errors[:2]}")
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    for kind, batch in sorted({(k, b) for _, k, b in delta}):
        t = delta.get((m.DECODE_TOKENS, kind, batch), 0.0)
        s = delta.get((m.DECODE_SECONDS, kind, batch), 0.0)
        print(f"{kind:12s} batch {batch:>3s}  tokens {t:7.0f}  request-s {s:7.1f}  "
              f"tok/s {t / s if s else 0.0:6.2f}")


if __name__ == "__main__":
    main()
