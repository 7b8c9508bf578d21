"""``make demo``: the whole loop on one machine, narrated (``python -m specd_dev.demo``).

The local cluster with the pod runner and Prometheus; a throwaway PostgreSQL as the history
store; ``helm install`` of the chart (the operator and the dashboard run as pods, the
dashboard's controls on for a local user); then the story of ``specd_dev.demo.story`` under
open-loop mixed-task traffic. ``--once`` (``make demo DEMO_ONCE=1``) runs it without waiting
for the user and exits 0 only if every stage happened as expected; otherwise everything
keeps running until Ctrl-C, then is torn down.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specd_dev.demo import story
from specd_dev.demo.shots import Shots
from specd_dev.demo.summary import Figures, measure, table
from specd_dev.demo.traffic import OpenLoop

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "helm" / "specd"
RELEASE, SYSTEM = "specd", "specd-system"
DASHBOARD_USER = "demo"


class StageFailed(RuntimeError):
    pass


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = time.monotonic()
        self.marks: list[tuple[str, float]] = []
        self.peak_used = self.base_used = used_memory()
        self.failures: list[str] = []
        self.last: dict | None = None  # the status last told
        self.outcomes: list[str] = []  # what happened, for the summary

    # ---- narration ----------------------------------------------------------------------

    def say(self, line: str) -> None:
        self.peak_used = max(self.peak_used, used_memory())
        print(f"[{time.monotonic() - self.started:6.1f}s] {line}", flush=True)

    def stage(self, title: str) -> None:
        self.marks.append((title, time.monotonic() - self.started))
        print(flush=True)
        self.say(f"== {title}")

    def follow(self, svc: Any, done: Callable[[dict], bool], what: str,
               timeout: float) -> dict:
        """Tell every status change until ``done(status)``; StageFailed after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            status = svc.status()
            for line in story.tell(self.last, status):
                self.say(line)
            self.last = status
            if done(status):
                return status
            if time.monotonic() > deadline:
                raise StageFailed(f"{what}: not within {timeout:.0f} s")
            time.sleep(2)


def used_memory() -> int:
    """Bytes in use on this machine (MemTotal - MemAvailable)."""
    info = {}
    with open("/proc/meminfo") as handle:
        for line in handle:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0]) * 1024
    return info["MemTotal"] - info["MemAvailable"]


def install(demo: Demo, cluster: Any, history_url: str, token: str) -> str:
    """The chart, as a user installs it; returns the dashboard's URL."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    for name in (SYSTEM, story.NAMESPACE):
        core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_secret(SYSTEM, {"metadata": {"name": "specd-history"},
                                           "stringData": {"url": history_url}})
    core.create_namespaced_secret(SYSTEM, {"metadata": {"name": "specd-dashboard-tokens"},
                                           "stringData": {"tokens": f"{DASHBOARD_USER}={token}"}})
    values = {
        "watchNamespaces": f"{{{story.NAMESPACE}}}",
        "operator.prometheusUrl": cluster.prometheus_url,
        "operator.resync": "30",
        "operator.history.type": "postgresql",
        "operator.history.postgresql.existingSecret": "specd-history",
        # the lossless probes reach pods through the runner's loopback ports
        "operator.env[0].name": "SPECD_POD_ADDRESS_MAP",
        "operator.env[0].value": str(cluster.pod_address_map),
        "dashboard.enabled": "true",
        "dashboard.controls.enabled": "true",
        "dashboard.controls.allowedUsers": f"{{{DASHBOARD_USER}}}",
        "dashboard.controls.tokensSecret": "specd-dashboard-tokens",
    }
    argv = ["install", RELEASE, str(CHART), "-n", SYSTEM]
    for key, value in values.items():
        argv += ["--set", f"{key}={value}"]
    cluster.helm(*argv, timeout=240)
    demo.say(f"helm install {RELEASE} helm/specd -n {SYSTEM}: operator and dashboard pods")
    url: str = cluster.service_url(SYSTEM, f"{RELEASE}-dashboard", ready=1, timeout=180)
    return url


def wait_operator(cluster: Any, timeout: float = 180) -> None:
    from kubernetes import client

    from specd_dev.cluster.handle import wait_for

    core = client.CoreV1Api(cluster.api_client())

    def ready() -> bool:
        pods = core.list_namespaced_pod(
            SYSTEM, label_selector="app.kubernetes.io/component=operator").items
        return any(c.type == "Ready" and c.status == "True"
                   for p in pods for c in p.status.conditions or [])
    wait_for(ready, "the operator pod Ready", timeout=timeout, interval=1)


def bad_model(work: Path) -> Path:
    os.environ["TQDM_DISABLE"] = "1"  # transformers' GGUF loading bars
    from specd.worker.model import load_model
    from specd_dev.models import perturbed_copy

    return perturbed_copy(load_model("smollm2-135m"), work / "perturbed")


def run_story(demo: Demo, cluster: Any, history_url: str, work: Path, shots: Shots,
              finish: Callable[[dict[str, Figures]], None]) -> None:
    from specd.operator.analysis.provider import PrometheusProvider
    from specd_dev.testing import Svc

    prometheus = PrometheusProvider(cluster.prometheus_url)
    svc = Svc(cluster, story.NAMESPACE, story.SERVICE)
    figures: dict[str, Figures] = {}
    page = f"ns={story.NAMESPACE}&name={story.SERVICE}"

    demo.stage("2/6 Scheme A: parallel draft heads, fixed-length verification (K=3)")
    svc.create(story.scheme_a())
    demo.follow(svc, lambda s: s.get("phase") == "Ready", "Scheme A Ready", 300)
    demo.outcomes.append("Scheme A Ready")
    url = cluster.service_url(story.NAMESPACE, story.SERVICE, ready=1)
    with OpenLoop(url, rate=demo.args.rate) as traffic:
        demo.say(f"traffic: Poisson arrivals at {demo.args.rate}/s, the pilot's chat and code "
                 f"prompts (English and Chinese), {traffic.max_tokens} tokens each, through "
                 f"{url}")
        time.sleep(demo.args.measure_s)
        figures["A"] = measure(prometheus, story.NAMESPACE, story.SERVICE,
                               f"{demo.args.measure_s:.0f}s")
        demo.say(f"Scheme A: {figures['A'].line()}")

        demo.stage("3/6 migrate to Scheme B: semi-autoregressive drafter, scheduled "
                   "verification, as a canary")
        before = svc.status().get("stableRevision")
        svc.patch(story.to_scheme_b())
        demo.follow(svc, lambda s: story.measured_canary(s) or story.rollout_ended(s, before),
                    "the canary's first analysis", 600)
        shots.take("demo-rollout-canary", f"/rollout?{page}", "analysis")
        shots.take("demo-service-canary", f"/service?{page}&w=5m", "acceptance")
        promoted = demo.follow(svc, lambda s: story.rollout_ended(s, before),
                               "Scheme B judged", 600)
        if (promoted.get("rollout") or {}).get("phase") != "Healthy":
            raise StageFailed(f"Scheme B was rolled back: {story.rolled_back_reason(promoted)}")
        demo.outcomes.append("Scheme B promoted: every analysis check passed, per task group")
        demo.follow(svc, lambda s: svc.tracks() == {"stable": 1}, "the canary scaled to 0", 180)
        time.sleep(demo.args.measure_s)
        figures["B"] = measure(prometheus, story.NAMESPACE, story.SERVICE,
                               f"{demo.args.measure_s:.0f}s")
        demo.say(f"Scheme B: {figures['B'].line()}")

        demo.stage("4/6 a bad revision: a target whose greedy outputs differ")
        model_dir = bad_model(work)
        demo.say(f"the embedded model with its weights perturbed by 5 % ({model_dir}), "
                 "drafted by prompt lookup")
        svc.patch(story.bad_revision(str(model_dir)))
        on_b = svc.status().get("stableRevision")
        rolled = demo.follow(svc, lambda s: story.rollout_ended(s, on_b),
                             "the bad revision judged", 600)
        if (rolled.get("rollout") or {}).get("phase") != "RolledBack":
            raise StageFailed("the bad revision was promoted")
        demo.outcomes.append(f"the bad revision rolled back: {story.rolled_back_reason(rolled)}")
        shots.take("demo-rollout-rolled-back", f"/rollout?{page}", "Rolled back")
        probes = [a for a in rolled.get("analysis") or [] if a.get("metric") == "losslessProbe"]
        if not any(a.get("verdict") == "Failed" for a in probes):
            demo.failures.append("stage 4: the rollback was not the lossless probes' doing")
        # back to Scheme B's model (the reference the stable track serves), so the
        # service is Healthy again for the tuner
        svc.patch(story.back_to_scheme_b())
        demo.follow(svc, lambda s: (s.get("rollout") or {}).get("phase") == "Healthy"
                    and svc.tracks() == {"stable": 1}, "the service back on Scheme B", 300)

        demo.stage(f"5/6 the tuner, with the {story.BAD_GROUP} group sampled at temperature "
                   f"{story.BAD_TEMPERATURE} (its drafts are mostly rejected)")
        traffic.temperatures[story.BAD_GROUP] = story.BAD_TEMPERATURE
        traffic.rate = max(traffic.rate, story.TUNING_RATE)  # from the next minute of arrivals
        demo.say(f"traffic: Poisson arrivals at {traffic.rate}/s now (one worker left)")
        svc.patch(story.tuning_on())
        watch = story.TunerWatch(story.BAD_GROUP)
        demo.follow(svc, watch, f"a tuner decision for {story.BAD_GROUP}",
                    12 * story.TUNING_INTERVAL_S + 60)
        entry = watch.entry
        if watch.changed:
            demo.outcomes.append(f"the tuner: {story.BAD_GROUP} {entry.get('action')} "
                                 f"({entry.get('reason')})")
            evidence(demo, history_url)
        else:
            demo.outcomes.append(f"the tuner: {story.BAD_GROUP} held on data for "
                                 f"{watch.intervals} intervals ({entry.get('reason')})")
        shots.take("demo-policy-tuned", f"/policy?{page}", "decisions")
        shots.take("demo-fleet", "/", "services,")
        counts = traffic.counts()
        demo.say(f"traffic: {counts}")
        bad = {k: v for k, v in counts.items() if k != "ok"}
        if bad:
            demo.failures.append(f"requests that did not succeed: {bad} "
                                 f"({traffic.errors[:3]})")
        finish(figures)  # the summary, and (without --once) the wait, under traffic still


def evidence(demo: Demo, history_url: str) -> None:
    from specd.operator.history.read import policy_changes

    for change in policy_changes(history_url, story.NAMESPACE, story.SERVICE, limit=5):
        if change.task_group == story.BAD_GROUP:
            demo.say(f"history store: {change.task_group} {change.action}, evidence "
                     f"{story.evidence_summary(change.evidence)}")
            return
    demo.failures.append("stage 5: the tuner's change is not in the history store")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true",
                        help="run the story and exit: 0 only if every stage happened")
    parser.add_argument("--name", default="specd-demo", help="local cluster name")
    parser.add_argument("--rate", type=float, default=0.4, help="requests/s (Poisson)")
    parser.add_argument("--measure-s", type=float, default=45.0,
                        help="seconds of traffic each scheme is measured over")
    parser.add_argument("--screenshots", type=Path, default=None, metavar="DIR",
                        help="save screenshots of the dashboard here during the story")
    args = parser.parse_args(argv)

    from specd_dev.cluster import control_plane
    from specd_dev.postgres import throwaway

    # `timeout` and CI stop with SIGTERM: tear down as for Ctrl-C
    signal.signal(signal.SIGTERM, _interrupt)
    demo = Demo(args)
    demo.stage("1/6 the local cluster, Prometheus, the history store and the chart")
    work = Path(tempfile.mkdtemp(prefix="specd-demo-", dir="/var/tmp"))
    state_dir = control_plane.default_state_dir(args.name)
    control_plane.down(state_dir, progress=lambda _: None)  # a fresh cluster each run
    ok = False
    try:
        cluster = control_plane.up(state_dir, name=args.name, progress=demo.say)
        with throwaway() as history_url:
            token = secrets.token_urlsafe(18)
            url = install(demo, cluster, history_url, token)
            demo.say(f"dashboard: {url}  (sign in with the access token {token})")
            wait_operator(cluster)
            demo.say("operator Ready (in-cluster, the chart's ServiceAccount)")
            shots = Shots(url, args.screenshots)

            def finish(figures: dict[str, Figures]) -> None:
                nonlocal ok
                shots.close()
                if shots.taken:
                    demo.say(f"screenshots: {', '.join(str(p) for p in shots.taken)}")
                summary(demo, figures)
                ok = not demo.failures
                if not args.once:
                    print(f"\nEverything keeps running, traffic too: the dashboard is at {url}."
                          " Ctrl-C ends the demo and tears it all down.", flush=True)
                    wait_for_interrupt()

            try:
                run_story(demo, cluster, history_url, work, shots, finish)
            finally:
                shots.close()
    except StageFailed as exc:
        print(f"NOT AS EXPECTED: {exc}", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    finally:
        control_plane.down(state_dir, progress=lambda _: None)
        shutil.rmtree(work, ignore_errors=True)
        print("torn down", flush=True)
    return 0 if ok else 1


def summary(demo: Demo, figures: dict[str, Figures]) -> None:
    demo.stage("6/6 summary")
    for outcome in demo.outcomes:
        print(f"- {outcome}")
    for line in table(figures):
        print(line)
    print(f"wall time {time.monotonic() - demo.started:.0f} s; stages at "
          + ", ".join(f"{title.split(' ')[0]} {t:.0f}s" for title, t in demo.marks))
    print(f"memory in use: {demo.base_used / 2**30:.1f} GiB before, peak "
          f"{demo.peak_used / 2**30:.1f} GiB (+{(demo.peak_used - demo.base_used) / 2**30:.1f})")
    for failure in demo.failures:
        print(f"NOT AS EXPECTED: {failure}")


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def wait_for_interrupt() -> None:
    while True:  # until Ctrl-C (or SIGTERM): KeyboardInterrupt ends it
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
