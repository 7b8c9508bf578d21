"""One tuning interval, pure (operator/tuner/loop.py and signals.py): recorded Prometheus
vectors -> windows -> decisions -> status.tuning, with no cluster and no Prometheus."""

from __future__ import annotations

import pytest

from specd.api.spec import parse_spec
from specd.operator.tuner import decide, signals
from specd.operator.tuner.loop import epoch, tune

INTERVAL = 60.0
SETTINGS = decide.Settings.for_interval(INTERVAL)
T0 = 1_800_000_000.0


def spec(**tuning):
    return parse_spec({"model": {"reference": "smollm2-135m"},
                       "worker": {"image": "specd-worker:dev"},
                       "drafter": {"method": "semi-ar", "k": 4},
                       "verification": {"mode": "scheduled"},
                       "tuning": {"enabled": True, "interval": "1m", **tuning}})


def vectors(groups: dict[str, tuple[float, float]], plain_rate: float = 10.0,
            requests: float = 40.0, acceptance: float = 0.5) -> dict:
    """Recorded instant vectors: per group (speculative tokens, request-seconds) at batch 4,
    plain rounds at ``plain_rate`` tokens per request-second, four draft positions."""
    def series(**labels):
        return dict(labels)

    tokens, seconds = [], []
    for g, (tok, sec) in groups.items():
        tokens.append((series(task_group=g, round_kind="speculative", batch="4"), tok))
        seconds.append((series(task_group=g, round_kind="speculative", batch="4"), sec))
        tokens.append((series(task_group=g, round_kind="plain", batch="4"), 100.0))
        seconds.append((series(task_group=g, round_kind="plain", batch="4"), 100.0 / plain_rate))
    per_position = {"verified": [], "reached": [], "accepted": []}
    for g in groups:
        for i in range(1, 5):
            reached = 1000.0 * acceptance ** (i - 1)
            per_position["verified"].append((series(task_group=g, position=str(i)), 1000.0))
            per_position["reached"].append((series(task_group=g, position=str(i)), reached))
            per_position["accepted"].append((series(task_group=g, position=str(i)),
                                             reached * acceptance))
    return {"requests": [(series(task_group=g), requests) for g in groups],
            "tokens": tokens, "seconds": seconds, **per_position}


def test_windows_compare_speculation_with_the_plain_reference_at_the_same_batch() -> None:
    found = signals.windows(vectors({"code": (600.0, 100.0), "chat": (1500.0, 100.0)}), T0)
    code, chat = found["code"], found["chat"]
    assert code.goodput == pytest.approx(6.0) and code.plain_goodput == pytest.approx(10.0)
    assert chat.goodput == pytest.approx(15.0) and code.plain_samples == 200.0
    assert code.acceptance_by_position == pytest.approx((0.5,) * 4)
    assert code.verified_by_position == (1000.0,) * 4 and code.requests == 40.0
    # a bucket without plain rounds is left out of both sides
    only_spec = vectors({"code": (600.0, 100.0)})
    only_spec["tokens"] = [t for t in only_spec["tokens"] if t[0]["round_kind"] != "plain"]
    alone = signals.windows(only_spec, T0)["code"]
    assert alone.plain_goodput is None and alone.goodput == pytest.approx(6.0)


def test_queries_select_one_service_stable_track() -> None:
    queries = signals.Queries("ns", "svc", "5m").all()
    assert set(queries) == {"requests", "tokens", "seconds", "accepted", "reached", "verified",
                            "predicted"}
    assert all('serving_specd_io_service="svc"' in q and 'track="stable"' in q and "[5m]" in q
               for q in queries.values())


def run(s, windows, steps: int, status=None, start: float = T0, **kw):
    """``steps`` intervals with the same windows; the status carried from one to the next."""
    results = []
    for i in range(steps):
        result = tune(s, status, windows, start + i * INTERVAL, settings=SETTINGS, **kw)
        status = {"tuning": result.status}
        results.append(result)
    return results, status


def test_a_group_slower_than_plain_goes_plain_then_is_re_probed_with_back_off() -> None:
    s = spec()
    slow = signals.windows(vectors({"code": (600.0, 100.0), "chat": (1500.0, 100.0)}), T0)
    results, status = run(s, slow, 2)
    assert not results[0].changes  # one window is not evidence enough to back off
    assert "1/2 windows agree" in results[0].status["groups"]["code"]["reason"]
    (change,) = results[1].changes
    assert (change.group, change.decision.action, change.applied) == ("code", "plain", True)
    assert status["tuning"]["overlay"] == {"code": {"mode": "plain"}}
    assert s.policy({"code": decide_overlay(status)}).for_group("code").mode == "plain"
    assert results[1].condition[:2] == (True, "PolicyChanged")
    code = status["tuning"]["groups"]["code"]
    assert code["mode"] == "plain" and code["speculativeMode"] == "scheduled"
    assert epoch(code["holdUntil"]) == T0 + INTERVAL + SETTINGS.backoff_s
    # chat (faster than plain, positions in the dead band) held all along
    assert status["tuning"]["groups"]["chat"]["action"] == "hold"
    # plain for the back-off, then speculation is tried again (never a latch)
    later, status = run(s, slow, 4, status, start=T0 + 2 * INTERVAL)
    assert [r.changes[0].decision.action if r.changes else "hold" for r in later] == [
        "hold", "hold", "speculate", "hold"]
    assert status["tuning"]["overlay"]["code"]["mode"] == "scheduled"
    assert status["tuning"]["groups"]["code"]["backoffSeconds"] == 2 * SETTINGS.backoff_s


def decide_overlay(status):
    from specd.operator.tuner.overlay import read_overlay

    return read_overlay({"status": status})["code"]


def test_a_naive_threshold_flips_every_window_this_one_does_not() -> None:
    """Goodput alternating 2 % either side of plain: a rule 'plain when slower' flips each
    window; the margin and the streak keep this one speculating."""
    s = spec()
    status, flips = None, 0
    for i in range(12):
        tokens = 1020.0 if i % 2 else 980.0
        windows = signals.windows(vectors({"code": (tokens, 100.0)}), T0 + i * INTERVAL)
        result = tune(s, status, windows, T0 + i * INTERVAL, settings=SETTINGS)
        status = {"tuning": result.status}
        flips += len(result.changes)
    naive = sum(1 for i in range(1, 12) if (i % 2) != ((i - 1) % 2))
    assert naive == 11 and flips == 0


def test_no_data_unavailable_metrics_pins_dry_run_and_canaries_change_nothing() -> None:
    slow = signals.windows(vectors({"code": (600.0, 100.0)}), T0)
    quiet = signals.windows(vectors({"code": (600.0, 100.0)}, requests=3), T0)
    result = run(spec(), quiet, 3)[0][-1]
    assert not result.changes and result.condition[:2] == (False, "NoData")
    result = run(spec(), None, 3, unavailable="Prometheus at http://x unreachable")[0][-1]
    assert not result.changes and result.condition[:2] == (False, "MetricsUnavailable")
    assert "unreachable" in result.status["groups"].get("code", {}).get("reason", "unreachable")
    # a plain group is not re-probed without metrics, nor without traffic
    _, plain = run(spec(), slow, 2)
    assert plain["tuning"]["overlay"] == {"code": {"mode": "plain"}}
    late = T0 + 10 * INTERVAL  # the back-off long past
    for windows, unavailable in ((None, "Prometheus at http://x unreachable"), (quiet, None)):
        held = tune(spec(), plain, windows, late, unavailable=unavailable, settings=SETTINGS)
        assert not held.changes, held.changes
    assert tune(spec(), plain, slow, late, settings=SETTINGS).changes[0].decision.action == \
        "speculate"
    result = run(spec(pinnedGroups=["code"]), slow, 3)[0][-1]
    assert not result.changes and "pinned" in result.holds["code"]
    result = run(spec(), slow, 3, frozen="a canary rollout is in progress")[0][-1]
    assert not result.changes and result.condition[:2] == (False, "Frozen")
    # dry run: recommended (recorded), not applied; the overlay stays empty
    results, status = run(spec(dryRun=True), slow, 2)
    (change,) = results[1].changes
    assert not change.applied and status["tuning"]["overlay"] == {}
    assert status["tuning"]["groups"]["code"]["dryRun"].startswith("would plain")
    assert results[1].condition[:2] == (True, "Recommended")


def test_a_tail_that_does_not_accept_is_shortened_one_step_within_bounds() -> None:
    s = spec(bounds={"maxVerify": {"min": 3, "max": 4}})
    weak_tail = signals.windows(vectors({"chat": (1500.0, 100.0)}, acceptance=0.2), T0)
    results, status = run(s, weak_tail, 8)
    actions = [c.decision.action for r in results for c in r.changes]
    assert actions == ["shrink"]  # 4 -> 3, then the bound holds
    assert status["tuning"]["overlay"]["chat"] == {"mode": "scheduled", "k_max": 3,
                                                   "max_verify": 3}
    assert s.policy(read(status)).for_group("chat").max_verify == 3


def read(status):
    from specd.operator.tuner.overlay import read_overlay

    return read_overlay({"status": status})


def with_predictions(found: dict, predicted: float) -> dict:
    """The same windows, the scheduler having predicted ``predicted`` at every position."""
    from dataclasses import replace

    return {g: replace(w, reached_by_position=(1000.0, 500.0, 250.0, 125.0),
                       predicted_by_position=(predicted,) * 4) for g, w in found.items()}


def test_an_over_confident_group_is_recalibrated_once_and_then_holds() -> None:
    """Predicted 0.9 where 0.5 is accepted: a per-position bias of logit(0.5) - logit(0.9)
    (-2.2) goes into the overlay; measured calibrated afterwards, it holds."""
    s = spec()
    window = signals.windows(vectors({"chat": (1500.0, 100.0)}), T0)
    over = with_predictions(window, 0.9)
    first = tune(s, None, over, T0, settings=SETTINGS)
    (change,) = first.changes
    assert change.decision.action == "recalibrate" and "ECE 0.400" in change.decision.reason
    assert set(first.status["overlay"]["chat"]) == {"calibration"}  # mode and K untouched
    bias = first.status["overlay"]["chat"]["calibration"]["bias"]
    assert bias == pytest.approx([-2.1972] * 4, abs=1e-3)
    assert change.after["calibration"]["bias"] == bias and change.before["calibration"][
        "bias"] == []
    from specd.operator.tuner.overlay import read_overlay

    overlay = read_overlay({"status": {"tuning": first.status}})
    assert s.policy(overlay).for_group("chat").calibration.bias == bias
    # within the dwell nothing more; once calibrated (predictions now match) it holds
    status = {"tuning": first.status}
    assert not tune(s, status, over, T0 + INTERVAL, settings=SETTINGS).changes
    calibrated = with_predictions(window, 0.52)
    later = tune(s, status, calibrated, T0 + 3 * INTERVAL, settings=SETTINGS)
    assert not later.changes
    # fixed mode has no use for calibration: never recalibrated
    fixed = parse_spec({**s.model_dump(by_alias=True), "verification": {"mode": "fixed"}})
    assert not tune(fixed, None, over, T0, settings=SETTINGS).changes
    assert decide.calibration_error(over["chat"], SETTINGS) == pytest.approx((0.4, 4))
