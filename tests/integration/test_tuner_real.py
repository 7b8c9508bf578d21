"""The policy tuner end to end on real workers: real `specd serve` processes (the pod
runner), real Prometheus, bounded real traffic through the Service URL, the real operator
with --prometheus-url deciding every 40 s interval.

Every scenario is built on contrasts measured in-process first, far outside the tuner's 3 %
margin, and chosen so that they hold on any CPU rather than where speculation happens to win.
How much a verified token costs differs by machine: where the forward pass is memory-bound
(one thread, batch 1), verifying five tokens costs about what one does and a drafter that is
nearly always wrong still ties plain decoding (the semi-ar drafter on a story at temperature
2.0, tau 1.15: 1.00-1.14x its true-plain reference); where it is compute-bound, a few
verified tokens cost nearly a plain step each. What loses on every machine is drafting that
costs in proportion to its length: the classic draft model drafts one token after another.
Measured in-process (`python -m specd.worker.bench.spec_vs_reference`, one thread, one request
at a time, 16 tokens, greedy unless said):

- draft model, K=2, "Count from 1 to 30": 1.50x its true-plain reference (tau about 1.7);
- draft model, K=12, a story at temperature 2.0: 0.75x (tau 1.15: twelve drafts, one kept in
  seven rounds); 0.90x at K=8;
- semi-ar, K=4, "Count from 1 to 30": 1.25-2.5x at concurrency 1; 0.61-1.10x at 16 (by
  machine: see STEPPED), 0.60-0.78x at 48.

One service with the draft model, fixed verification, K=2 for chat and K=12 for code (a
group's own length, `verification.groups`; bounds 2-12, so neither can move the other way
than plain), tuning on:

1. No traffic: every interval holds, and the Tuned condition says NoData.
2. Mixed traffic, one request at a time, where the code group samples a story at
   temperature 2.0 (its twelve drafts are mostly rejected) and chat decodes greedily a count
   the drafter follows: code goes plain -- its goodput measured below the workers' own
   true-plain reference rounds -- while chat stays speculative; the ConfigMap, the workers'
   metrics, the history store and an Event all say so. No request fails. Then every
   request goes to the tuned worker and to a plain-only worker (no drafter) beside it, one
   after the other with the same seed, streamed: over the same window code drafts nothing
   on the tuned worker and emits every token in plain mode, chat keeps drafting and runs
   faster than on the plain-only worker, and the median of the pairs' TPOT ratios for code
   is printed (its speed against plain-only is `plain_group_cost`'s to show: 1.002).
3. The operator SIGKILLed and restarted: the tuned overlay is still rendered (it lives in
   the status), and the plain back-off goes on from where it was (status.tuning).
4. Prometheus stopped (SIGSTOP): the next interval changes nothing and says why.
5. `kubectl specd policy tuned --group chat --pin`: the tuner holds chat from the next
   interval; `kubectl specd policy tuned` shows each group's mode, K, pin and reason.

A steady load, then a step: Scheme A at K=4 (semi-ar) under concurrency 1 holds 10 intervals
with at most one change, judged on data; at concurrency 48 it loses to plain and the group goes
plain within the evidence time, with at most two changes (plain, and the re-probe after it).

A third service, scheduled verification with a deliberately over-confident calibration
(bias +2 in logit units on every position): the tuner's recalibration brings the measured
expected calibration error below 0.05 (measured 0.18 -> 0.04 in one correction), and
accepted tokens per verified token hold within 5 % (before and after measured from
Prometheus in the same test, the first with tuning still off).
"""

from __future__ import annotations

import json
import sqlite3
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specd.api import k8s
from specd.api import metrics as names
from specd.kubectl.cli import main as kubectl_specd
from specd_dev.cluster.handle import wait_for
from specd_dev.testing import Svc, Traffic, operator_for_namespace, prometheus_stopped

pytestmark = pytest.mark.cluster

INTERVAL_S = 40
SPEC = {
    "replicas": 1,
    "model": {"reference": "smollm2-135m", "maxContext": 512},
    "drafter": {"method": "draft-model", "k": 12},
    "verification": {"mode": "fixed", "fixedLength": 12,
                     "groups": {"chat": {"k": 2, "fixedLength": 2}}},
    "engine": {"maxBatch": 4, "queueBound": 16, "extraArgs": ["--cost-profile=none"]},
    "worker": {"image": "specd-worker:dev",
               "resources": {"limits": {"cpu": "1", "memory": "3Gi", "nvidia.com/gpu": 1}}},
    # one request at a time: a 0.3 share of plain rounds gives the groups a reference of
    # well over the 50 plain tokens a window needs. Two groups taking turns finish 6-9
    # requests each per interval on a slow 2-core machine (code's twelve drafts a round
    # take their time), so a window is judged on 5: 80 decoded tokens, where chat reads
    # 1.45-1.49x its reference and code 0.75-0.78x, far outside the 3 % margin
    "tuning": {"enabled": True, "interval": f"{INTERVAL_S}s", "referenceShare": 0.3,
               "minRequests": 5,
               "bounds": {"modes": ["fixed", "plain"], "fixedLength": {"min": 2, "max": 12}}},
}
PROMPTS = {"chat": "Count from 1 to 30, separated by commas.",
           "code": "Write a story about a dragon."}
TEMPERATURES = {"code": 2.0}
# the same worker decoding plainly, no drafter: what the plain group's TPOT must recover to
PLAIN_ONLY = {**SPEC, "drafter": {"method": "none"}, "verification": {"mode": "plain"},
              "tuning": {"enabled": False}}
# the TPOT window: TPOT_WINDOW_S, then longer until each group has PAIRS_PER_GROUP pairs, at
# most TPOT_EXTRA_S more, all inside the plain back-off (3 intervals) once code decodes plain.
# A pair of each takes 2-10 s by machine: on a slow one 60 s held 3 chat pairs, and a window
# cut at 5 pairs on a fast one (20 s) read chat's ratio anywhere from 0.69x to 1.16x
TPOT_WINDOW_S, TPOT_EXTRA_S = 60, 20
PAIRS_PER_GROUP = 5


@pytest.fixture(scope="module")
def op(cluster, tmp_path_factory):
    with operator_for_namespace(cluster, tmp_path_factory.mktemp("op"), "tune",
                                extra=("--prometheus-url", cluster.prometheus_url)) as running:
        yield running


def tuned(status: dict) -> dict:
    return status.get("tuning") or {}


def condition(status: dict) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == "Tuned"), {})


def worker_port(cluster, svc: Svc) -> int:
    """The loopback port of the service's one worker (a real process of the pod runner)."""
    (pod,) = [p for p in svc.core.list_namespaced_pod(
        svc.ns, label_selector=f"{k8s.LABEL_SERVICE}={svc.name}").items
        if p.metadata.deletion_timestamp is None]
    return int(cluster.runner_state().pod(svc.ns, pod.metadata.name)["ports"]["8000"])


def summed(port: int, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """One metric's samples from a worker's /metrics, summed by the values of ``labels``."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    out: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                key = tuple(sample.labels[label] for label in labels)
                out[key] = out.get(key, 0.0) + sample.value
    return out


def drafted_by_group(port: int) -> dict[tuple[str, ...], float]:
    return summed(port, f"{names.DRAFTED_TOKENS}_total", "task_group")


def emitted_by_mode(port: int) -> dict[tuple[str, ...], float]:
    return summed(port, f"{names.EMITTED_TOKENS}_total", "task_group", "policy_mode")


def tpot_by_group(port: int) -> dict[str, tuple[float, float]]:
    """Per task group: the worker's TPOT histogram (sum of seconds, requests) so far."""
    sums = summed(port, f"{names.TIME_PER_OUTPUT_TOKEN_SECONDS}_sum", "task_group")
    counts = summed(port, f"{names.TIME_PER_OUTPUT_TOKEN_SECONDS}_count", "task_group")
    return {key[0]: (sums[key], counts.get(key, 0.0)) for key in sums}


def mean_tpot(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]],
              group: str) -> tuple[float, int]:
    """A group's mean TPOT between two readings, and the requests it rests on."""
    (s0, n0), (s1, n1) = before.get(group, (0.0, 0.0)), after[group]
    return ((s1 - s0) / (n1 - n0) if n1 > n0 else float("nan")), int(n1 - n0)


def test_a_group_that_drafts_badly_goes_plain_the_others_stay(cluster, op, capsys) -> None:
    namespace, operator = op
    svc = Svc(cluster, namespace, "tuned")
    svc.create(SPEC)
    plain_only = Svc(cluster, namespace, "plain-only")  # starts meanwhile; idle until step 2
    plain_only.create(PLAIN_ONLY)
    svc.wait(lambda s: s.get("phase") == "Ready", "the service Ready")

    # 1. no traffic: the intervals hold and say why
    quiet = svc.wait(lambda s: condition(s).get("reason") == "NoData",
                     "an interval without data", timeout=3 * INTERVAL_S + 60)
    assert tuned(quiet).get("overlay", {}) == {}
    assert "no change" in condition(quiet)["message"]

    # 2. mixed traffic: code goes plain, chat stays speculative
    url = cluster.service_url(namespace, "tuned", ready=1)
    with Traffic(url, concurrency=1, max_tokens=16, prompts=PROMPTS,
                 temperatures=TEMPERATURES) as traffic:
        started = time.monotonic()
        plain = svc.wait(lambda s: (tuned(s).get("overlay") or {}).get("code", {}).get(
            "mode") == "plain", "code tuned to plain", timeout=10 * INTERVAL_S + 120)
        took = time.monotonic() - started
        groups = tuned(plain)["groups"]
        assert groups["code"]["action"] == "plain" and "below true plain" in groups["code"][
            "reason"], groups["code"]
        assert groups["chat"]["mode"] == "fixed", groups["chat"]
        wait_for(lambda: svc.policy("stable").get("groups", {}).get("code", {}).get(
            "mode") == "plain", "the ConfigMap to carry the tuned group", timeout=30)
        assert svc.policy("stable")["mode"] == "fixed"  # the spec's mode for everyone else
        # the workers run code plain now: its tokens are counted under policy_mode="plain"
        port = worker_port(cluster, svc)
        wait_for(lambda: emitted_by_mode(port).get(("code", "plain"), 0) > 0,
                 "code tokens decoded plain", timeout=60)
        with capsys.disabled():  # capsys reads the plugin's table below; these go out
            print(f"\ncode went plain {took:.0f} s after the traffic started; "
                  f"evidence: {groups['code']['reason']}")
    assert traffic.sent > 0 and traffic.failed == 0, traffic.failures()

    # 2b. code's TPOT has recovered: from here on every request goes to the tuned worker and
    #     to a plain-only worker beside it, one after the other with the same seed (never
    #     both at once: two workers decoding together on a 2-core machine measure which one
    #     shared the CPU with the other's heavier rounds), read over the same window from the
    #     workers' own TPOT histograms
    plain_only.wait(lambda s: s.get("phase") == "Ready", "the plain-only service Ready")
    ref_port = worker_port(cluster, plain_only)
    ref_url = cluster.service_url(namespace, "plain-only", ready=1)
    with Traffic(url, concurrency=1, max_tokens=16, prompts=PROMPTS, temperatures=TEMPERATURES,
                 paired_with=ref_url) as traffic:
        time.sleep(5)  # the plain-only worker's first requests (cold caches) left out
        since = time.monotonic() - traffic.started
        before = (tpot_by_group(port), tpot_by_group(ref_port))
        work_before = (drafted_by_group(port), emitted_by_mode(port))
        time.sleep(TPOT_WINDOW_S)
        wait_for(lambda: min(traffic.paired_speed(g, since, time.monotonic() - traffic.started)[1]
                             for g in PROMPTS) >= PAIRS_PER_GROUP,
                 f"{PAIRS_PER_GROUP} pairs of each group", timeout=TPOT_EXTRA_S, interval=1)
        after = (tpot_by_group(port), tpot_by_group(ref_port))
        work_after = (drafted_by_group(port), emitted_by_mode(port))
        until = time.monotonic() - traffic.started
        still = tuned(svc.status())["groups"]["code"]
        assert still["mode"] == "plain" and still["plainSince"] == groups["code"][
            "plainSince"], ("re-probed inside the TPOT window", still)
        # the workers' own TPOT means over the window, for the record; the criterion is the
        # median of the pairs' ratios (client-side TPOT of the same request on both): the
        # window means moved with whatever else the 2-core machine ran (three full runs of
        # the code ratio: 0.988, 1.035, 0.911)
        tpot = {(g, side): mean_tpot(before[i], after[i], g)
                for g in PROMPTS for i, side in enumerate(("tuned", "plain-only"))}
        code_speed, code_pairs = traffic.paired_speed("code", since, until)
        chat_speed, chat_pairs = traffic.paired_speed("chat", since, until)
        with capsys.disabled():
            print(f"\nTPOT over {until - since:.0f} s (worker means s, requests): {tpot}; "
                  f"median of paired ratios: code (plain) at {code_speed:.3f}x the plain-only "
                  f"worker's speed ({code_pairs} pairs), chat (speculative) {chat_speed:.2f}x "
                  f"({chat_pairs} pairs)")
        assert min(code_pairs, chat_pairs) >= PAIRS_PER_GROUP, (code_pairs, chat_pairs, tpot)
        # code decodes as plain does on the tuned worker: not one drafted token over the
        # window, every token it emitted in plain mode, while chat kept drafting. How fast
        # that is next to a plain-only worker is the benchmark's to show (in-process, the
        # same pairs, python -m specd.worker.bench.plain_group_cost: 1.002); here the ratio
        # is printed, not asserted: a full make test read 0.918, the test alone 0.986 and 0.988
        drafted = {g: work_after[0].get((g,), 0.0) - work_before[0].get((g,), 0.0)
                   for g in PROMPTS}
        emitted = {key: n - work_before[1].get(key, 0.0) for key, n in work_after[1].items()}
        assert drafted["code"] == 0 and drafted["chat"] > 0, drafted
        assert emitted.get(("code", "plain"), 0) > 0, emitted
        assert all(n == 0 for (g, mode), n in emitted.items() if g == "code" and mode != "plain"), \
            emitted
        assert chat_speed > 1.0, (chat_speed, tpot)  # drafting well, still faster than plain

        # 3. the operator killed and restarted at once: the overlay is in the status, still
        #    rendered, and the back-off clock goes on (it would restart if kept in memory)
        code = tuned(svc.status())["groups"]["code"]
        last_run = tuned(svc.status())["lastRun"]
        operator.kill()
        operator.start()
        svc.wait(lambda s: tuned(s).get("lastRun", "") > last_run, "an interval after restart",
                 timeout=3 * INTERVAL_S + 60)
        assert svc.policy("stable")["groups"]["code"]["mode"] in ("plain", "fixed")
        after = tuned(svc.status())["groups"]["code"]
        if after["mode"] == "plain":
            assert (after["plainSince"], after["backoffSeconds"]) == (
                code["plainSince"], code["backoffSeconds"])
            assert svc.policy("stable")["groups"]["code"]["mode"] == "plain"
        else:  # the back-off ran out meanwhile: re-probed, the back-off doubled, not reset
            assert after["action"] == "speculate", after
            assert after["backoffSeconds"] == 2 * code["backoffSeconds"]

        # 4. Prometheus stopped: the next interval changes nothing, and says why
        before = tuned(svc.status())
        with prometheus_stopped(cluster):
            stopped = svc.wait(lambda s: condition(s).get("reason") == "MetricsUnavailable",
                               "an interval without Prometheus", timeout=3 * INTERVAL_S + 60)
        assert tuned(stopped)["overlay"] == before["overlay"]

        # 5. chat pinned with the plugin: the tuner leaves it alone from the next interval
        plugin = ["--kubeconfig", str(cluster.kubeconfig), "-n", namespace, "policy", "tuned"]
        assert kubectl_specd([*plugin, "--group", "chat", "--pin"]) == 0
        assert svc.custom.get_namespaced_custom_object(
            "serving.specd.io", "v1alpha1", namespace, "speculativeservices", "tuned")[
            "spec"]["tuning"]["pinnedGroups"] == ["chat"]
        pinned_run = tuned(svc.status())["lastRun"]
        svc.wait(lambda s: tuned(s).get("lastRun", "") > pinned_run and "pinned" in
                 tuned(s)["groups"]["chat"]["reason"], "chat held as pinned",
                 timeout=3 * INTERVAL_S + 60)
        capsys.readouterr()
        assert kubectl_specd(plugin) == 0
        table = capsys.readouterr().out
        assert "tuning: on" in table and any(
            line.split()[:4] == ["chat", "fixed", "2", "yes"] for line in table.splitlines())
        assert any(line.split()[:1] == ["code"] for line in table.splitlines())
        time.sleep(1)
    assert traffic.sent > 0 and traffic.failed == 0, traffic.failures()

    # every change is a history row with its evidence, and an Event
    events = [e for e in svc.core.list_namespaced_event(namespace).items
              if e.involved_object.name == "tuned" and e.reason == "PolicyTuned"]
    assert any("code: plain" in e.message for e in events), [e.message for e in events]
    path = operator.history_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        rows = db.execute("select task_group, reason, applied, evidence from policy_changes "
                          "where service = 'tuned'").fetchall()
    assert ("code", "plain", 1) in [r[:3] for r in rows], rows
    evidence = json.loads(next(r[3] for r in rows if r[0] == "code" and r[1] == "plain"))
    assert evidence["plain_goodput"] > 0 and "below true plain" in evidence["decision"], evidence
    svc.delete()
    plain_only.delete()


CALIBRATION = {
    **SPEC,
    "drafter": {"method": "semi-ar", "k": 4},
    # no survival floor: what gets verified is the cost-aware schedule's choice alone (a
    # floor above the true acceptance would leave nothing verified once calibrated)
    "verification": {"mode": "scheduled", "maxVerify": 4, "survivalFloor": 0.0,
                     "calibration": {"bias": [2.0]}},  # deliberately over-confident
    # measured step costs: the scheduler and its draft gate price with them (one request at
    # a time, where drafting this prompt pays, so the gate drafts and calibration is seen)
    "engine": {"maxBatch": 4, "queueBound": 16},
    # off at first: the miscalibration is measured over a whole interval before the tuner
    # may act on it (on from the start, its first interval could correct the bias before
    # the measurement, and "before" read a calibrated window)
    "tuning": {"enabled": False, "interval": f"{INTERVAL_S}s", "minRequests": 5,
               "bounds": {"modes": ["scheduled"], "maxVerify": {"min": 4, "max": 4}}},
}


def chat_window(cluster, namespace: str, name: str, interval_s: int = INTERVAL_S):
    """The chat group's ``decide.Window`` over the last interval, read as the tuner reads it
    (for the assertions, and to show the evidence when one fails)."""
    from specd.operator.analysis.provider import PrometheusProvider
    from specd.operator.tuner import signals

    provider = PrometheusProvider(cluster.prometheus_url)
    return signals.windows(signals.read(provider, signals.Queries(
        namespace, name, f"{interval_s}s")), time.time()).get("chat")


def measured(cluster, namespace: str, name: str) -> tuple[float | None, float]:
    """Over the last interval, from Prometheus as the tuner reads it: the chat group's
    expected calibration error and its accepted tokens per verified token."""
    from specd.operator.analysis.provider import PrometheusProvider
    from specd.operator.tuner import decide

    provider = PrometheusProvider(cluster.prometheus_url)
    window = chat_window(cluster, namespace, name)
    found = decide.calibration_error(window, decide.Settings()) if window else None
    sel = (f'{{namespace="{namespace}", serving_specd_io_service="{name}", '
           f'track="stable", task_group="chat"}}')
    accepted = provider.value(f"sum(increase(specd_accepted_tokens_total{sel}[{INTERVAL_S}s]))")
    verified = provider.value(f"sum(increase(specd_verified_tokens_total{sel}[{INTERVAL_S}s]))")
    return (found[0] if found else None), (accepted or 0.0) / verified if verified else 0.0


def test_an_over_confident_calibration_is_corrected(cluster, op) -> None:
    namespace, _ = op
    svc = Svc(cluster, namespace, "calibrated")
    svc.create(CALIBRATION)
    svc.wait(lambda s: s.get("phase") == "Ready", "the service Ready")
    url = cluster.service_url(namespace, "calibrated", ready=1)
    prompts = {"chat": PROMPTS["chat"]}
    with Traffic(url, concurrency=1, max_tokens=16, prompts=prompts) as traffic:
        time.sleep(INTERVAL_S + 10)  # one whole interval of traffic under the bias
        before = measured(cluster, namespace, "calibrated")
        assert before[0] is not None and before[0] > 0.05, before
        svc.patch({"spec": {"tuning": {**CALIBRATION["tuning"], "enabled": True}}})
        changed = svc.wait(lambda s: tuned(s).get("groups", {}).get("chat", {}).get(
            "action") == "recalibrate", "the tuner's recalibration", timeout=6 * INTERVAL_S)
        bias = tuned(changed)["overlay"]["chat"]["calibration"]["bias"]
        # the over-confidence taken back where the evidence is deepest: position 1, reached
        # by every drafted round (a later position, reached only after accepted drafts, may
        # have been under-confident even with +2: its bias may rise)
        assert bias[0] < 2.0, bias
        wait_for(lambda: svc.policy("stable").get("groups", {}).get("chat", {}).get(
            "calibration", {}).get("bias") == bias, "the ConfigMap to carry it", timeout=30)
        after = None
        for _ in range(6):  # a whole interval after each change, until calibrated
            time.sleep(INTERVAL_S + 5)
            after = measured(cluster, namespace, "calibrated")
            if after[0] is not None and after[0] < 0.05:
                break
        assert after is not None and after[0] is not None and after[0] < 0.05, (before, after)
        # calibrating costs no acceptance: accepted tokens per verified token hold within one
        # window's noise (one request at a time verifying is nearly free, so the schedule
        # verifies nearly every draft either way; measured 0.688 -> 0.674)
        assert after[1] >= 0.95 * before[1], (before, after)
        print(f"\nECE {before[0]:.3f} -> {after[0]:.3f}; accepted per verified token "
              f"{before[1]:.3f} -> {after[1]:.3f}; bias {bias}")
    assert traffic.sent > 0 and traffic.failed == 0, traffic.failures()
    svc.delete()


STEP_INTERVAL_S = 40
STEP_PROMPT = PROMPTS["chat"]
STEP_TOKENS = 24
STEP_PEAK = 48
# longer requests at the peak: each arrival prefills a chunk, and only rounds without one
# are compared; at 24 tokens a 40 s window at 48 held no reference round at all, at 64
# about nine (426 plain tokens; speculation 0.65x: docs/bench/serve_window_probe.py)
STEP_PEAK_TOKENS = 64
STEPPED = {
    **SPEC,
    # Scheme A at K=4 with the semi-ar drafter on STEP_PROMPT, 24 tokens, decode rounds
    # (one thread, in-process, greedy, 30 % reference rounds): 1.25-1.39x plain decoding at
    # concurrency 1. At 16 it depends on the machine: 0.70-0.78x where the verify pass is
    # compute-bound, 0.84-1.00x in-process and 1.10x behind `specd serve` where it is not
    # (CI once read 0.91x and the tuner rightly kept speculating), so the step goes to 48,
    # where verifying 5 tokens a row costs well over a plain step: behind `specd serve`
    # 0.78x (plain 4.21 tok/s per request over 299 reference tokens in 90 s).
    "drafter": {"method": "semi-ar", "k": 4},
    "verification": {"mode": "fixed", "fixedLength": 4},  # only the mode may move
    "engine": {"maxBatch": STEP_PEAK, "queueBound": 2 * STEP_PEAK,
               "extraArgs": ["--cost-profile=none"]},
    "worker": {**SPEC["worker"], "resources": {"limits": {
        **SPEC["worker"]["resources"]["limits"], "memory": "4Gi"}}},  # 48 x 512 KV rows
    "tuning": {**SPEC["tuning"], "interval": f"{STEP_INTERVAL_S}s",
               "bounds": {"modes": ["fixed", "plain"], "fixedLength": {"min": 4, "max": 4}}},
}


def changes(operator, name: str) -> list[tuple[str, str]]:
    """The tuner's applied changes to the service so far, in order: (group, action)."""
    path = operator.history_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        return db.execute("select task_group, reason from policy_changes where service = ? "
                          "and applied = 1 order by at", (name,)).fetchall()


def intervals(svc: Svc, n: int) -> list[dict]:
    """Wait for the next ``n`` tuning intervals; the chat group's entry in each."""
    seen: list[dict] = []
    for _ in range(n):
        last = tuned(svc.status()).get("lastRun", "")
        status = svc.wait(lambda s, last=last: tuned(s).get("lastRun", "") > last,
                          "the next interval", timeout=STEP_INTERVAL_S + 60)
        seen.append(tuned(status).get("groups", {}).get("chat", {}))
    return seen


def test_steady_load_holds_and_a_load_step_is_followed(cluster, op) -> None:
    namespace, operator = op
    svc = Svc(cluster, namespace, "stepped")
    svc.create(STEPPED)
    svc.wait(lambda s: s.get("phase") == "Ready", "the service Ready")
    url = cluster.service_url(namespace, "stepped", ready=1)
    prompts = {"chat": STEP_PROMPT}

    # steady: concurrency 1 for 2 intervals to converge, then 10 more with at most 1 change
    # (a window is judged on 5 finished requests; at 24 tokens one at a time finish 15-40
    # per 40 s interval)
    with Traffic(url, concurrency=1, max_tokens=STEP_TOKENS, prompts=prompts) as steady:
        intervals(svc, 2)
        before = changes(operator, "stepped")
        judged = intervals(svc, 10)
        during = changes(operator, "stepped")[len(before):]
    assert steady.sent > 0 and steady.failed == 0, \
        "\n".join([steady.failures(), *svc.pods_report()])
    assert len(during) <= 1, (during, [g.get("reason") for g in judged])
    # the intervals were judged on data, not held for the want of it
    on_data = [g for g in judged if not g.get("reason", "").startswith(
        ("too few requests", "no data"))]
    assert len(on_data) >= 8, [g.get("reason") for g in judged]
    assert svc.policy("stable").get("groups", {}).get("chat", {}).get("mode", "fixed") == \
        "fixed", svc.policy("stable")

    # a load step from 1 to 48: fixed K=4 now loses to plain; within the evidence (2 windows)
    # plus the window the step falls in, the group goes plain, with at most 2 changes in the
    # 5 intervals after the step (going plain, and at most the re-probe that follows)
    at_step = len(changes(operator, "stepped"))
    with Traffic(url, concurrency=STEP_PEAK, max_tokens=STEP_PEAK_TOKENS,
                 prompts=prompts) as peak:
        seen = intervals(svc, 5)
        after = changes(operator, "stepped")[at_step:]
        window = chat_window(cluster, namespace, "stepped", STEP_INTERVAL_S)
    assert peak.sent > 0 and peak.failed == 0, \
        "\n".join([peak.failures(), *svc.pods_report()])
    went_plain = next((i for i, g in enumerate(seen) if g.get("action") == "plain"), None)
    # the numbers first: pytest shortens a long message from the middle
    evidence = (f"goodput {window.goodput} vs plain {window.plain_goodput} on "
                f"{window.plain_samples} plain tokens, {window.requests} requests"
                if window else "no window")
    assert went_plain is not None and went_plain <= 3, (evidence,
                                                        [g.get("reason") for g in seen])
    assert "below true plain" in seen[went_plain]["reason"], seen[went_plain]
    assert after[0] == ("chat", "plain") and len(after) <= 2, after
    print(f"\nsteady: {len(during)} change(s) in 10 intervals ({len(on_data)} judged on "
          f"data); step 1 -> {STEP_PEAK}: plain in interval {went_plain + 1} "
          f"({seen[went_plain]['reason']}); changes after the step: {after}")
    svc.delete()
