"""The canary state machine, table by table, without a cluster: every transition, the
controls, analysis verdicts and their limits, the progress deadline, replica rounding, and
resuming from what ``.status`` holds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specd.api.spec import RolloutSpec
from specd.operator.rollout import controls
from specd.operator.rollout.canary import (
    Config,
    Measurement,
    Plan,
    Seen,
    Step,
    advance,
    parse_duration,
)
from specd.operator.rollout.split import actual_weight, split_replicas
from specd.operator.rollout.state import RolloutState, from_status, to_status

OLD, NEW = "rev-old", "rev-new"
THREE_STEPS = (Step(25, pause_s=10), Step(50, pause_s=10), Step(75, pause_s=10))


class World:
    """Drives ticks like the reconciler: Deployments become Ready at once (unless told not
    to), the plan's state is written back, analysis answers with a scripted verdict."""

    def __init__(self, config: Config, replicas: int = 4, ready: bool = True) -> None:
        self.config, self.replicas, self.ready = config, replicas, ready
        self.state = RolloutState(stable=OLD, phase="Healthy")
        self.seen = Seen(OLD, replicas)
        self.now = 1000.0
        self.events: list[str] = []
        self.verdict: str | None = "Successful"
        self.plans: list[Plan] = []
        self.measured = 0

    def tick(self, desired: str = NEW, dt: float = 1.0) -> Plan:
        self.now += dt
        self.measured = 0

        def measure() -> Measurement:
            self.measured += 1
            return Measurement(self.verdict, f"tokensPerSecond {self.verdict}")

        plan = advance(self.config, self.replicas, desired, self.state, self.seen, self.now,
                       measure if self.verdict is not None else None)
        self.state = plan.state
        self.events += [e.reason for e in plan.events]
        if self.ready:
            canary = plan.canary
            self.seen = Seen(plan.stable.version, plan.stable.replicas,
                             canary.version if canary else None, canary.replicas if canary else 0)
        self.plans.append(plan)
        return plan

    def until(self, predicate, desired: str = NEW, limit: int = 200, dt: float = 1.0) -> Plan:
        for _ in range(limit):
            plan = self.tick(desired, dt)
            if predicate(plan):
                return plan
        raise AssertionError(f"not reached; state {self.state}")


def cfg(**kw) -> Config:
    return Config(steps=kw.pop("steps", THREE_STEPS), **kw)


# ---- replica split ---------------------------------------------------------------------

@pytest.mark.parametrize("replicas", range(1, 11))
@pytest.mark.parametrize("weight", [1, 5, 10, 20, 25, 33, 50, 66, 75, 90, 99, 100])
def test_replica_split_follows_the_weight(replicas: int, weight: int) -> None:
    stable, canary = split_replicas(replicas, weight)
    if weight == 100:
        assert (stable, canary) == (0, replicas)
    elif replicas == 1:
        assert (stable, canary) == (1, 1)  # a surge of one: analysis needs both tracks
    else:
        assert stable + canary == replicas
        assert 1 <= canary <= replicas - 1  # at least one canary, at least one stable
        assert canary == min(max(1, int(replicas * weight / 100 + 0.5)), replicas - 1)


def test_replica_split_edges() -> None:
    assert split_replicas(4, 0) == (4, 0) and split_replicas(0, 50) == (0, 0)
    assert split_replicas(10, 25) == (7, 3)  # 2.5 rounds half up
    assert actual_weight(3, 1) == 25 and actual_weight(0, 0) == 0
    with pytest.raises(ValueError):
        split_replicas(4, 101)


def test_durations() -> None:
    assert parse_duration("30s") == 30 and parse_duration("1h30m") == 5400
    assert parse_duration("500ms") == 0.5 and parse_duration("2.5m") == 150
    for bad in ("", "5", "5x", "m5", "1h 30m"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_config_from_the_spec() -> None:
    spec = RolloutSpec.model_validate({
        "strategy": "Canary",
        "steps": [{"weight": 10, "pause": {"duration": "1m"}}, {"weight": 50, "pause": {}},
                  {"weight": 100}],
        "analysis": {"interval": "10s", "failureLimit": 1, "metrics": [
            {"name": "tps", "metric": "tokensPerSecond", "min": 0.95}]},
        "promote": {"id": "p1", "full": True}, "retry": "r1", "resume": "s1"})
    config = Config.from_spec(spec)
    assert config.steps == (Step(10, pause_s=60), Step(50, until_promoted=True), Step(100))
    assert config.analysis and config.interval_s == 10 and config.failure_limit == 1
    assert (config.promote_id, config.promote_full, config.retry, config.resume) == (
        "p1", True, "r1", "s1")


# ---- the happy path ----------------------------------------------------------------------

def test_first_deployment_has_no_canary() -> None:
    plan = advance(cfg(), 3, NEW, RolloutState(), Seen(None, 0), 0.0)
    assert plan.stable.version == NEW and plan.stable.replicas == 3 and plan.canary is None
    assert plan.state.stable == NEW and plan.state.phase == "Healthy"


def test_a_canary_walks_its_steps_then_is_promoted() -> None:
    world = World(cfg(analysis=True, interval_s=5))
    plan = world.tick()
    assert world.events == ["RolloutStarted"]
    assert plan.stable.version == OLD and plan.stable.replicas == 3
    assert plan.canary is not None and plan.canary.version == NEW and plan.canary.replicas == 1
    plan = world.until(lambda p: p.state.phase == "Healthy")
    weights: list[int] = []
    for p in world.plans:
        if p.canary and p.canary.replicas and (not weights or weights[-1] != p.weight):
            weights.append(p.weight)
    assert weights[:3] == [25, 50, 75] and weights[-1] == 100
    assert world.events.count("StepCompleted") == 3
    assert world.events[-1] == "RolloutCompleted"
    assert plan.canary is None and plan.stable.version == NEW and plan.stable.replicas == 4
    assert plan.state.stable == NEW and plan.state.canary is None
    # promotion rolled the stable track at full size while the canary still served
    promoting = [p for p in world.plans if p.state.phase == "Promoting"]
    assert promoting and promoting[0].stable.replicas == 4 and promoting[0].canary.replicas == 3


def test_a_step_pause_lasts_its_duration() -> None:
    world = World(cfg(steps=(Step(50, pause_s=30), Step(100))))
    world.tick()  # scaled; next tick sees Ready
    world.tick()
    started = world.state.step_started_at
    world.until(lambda p: p.state.step == 1, dt=1.0)
    assert world.now - started >= 30


def test_a_step_never_passes_on_no_data() -> None:
    world = World(cfg(analysis=True, interval_s=5, inconclusive_limit=100))
    world.verdict = "Inconclusive"
    for _ in range(60):  # far past the 10 s pause
        world.tick()
    assert world.state.step == 0 and world.state.phase == "Progressing"
    assert "waiting for a successful analysis" in world.state.message
    world.verdict = "Successful"
    world.until(lambda p: p.state.step == 1)


def test_without_analysis_a_step_passes_on_its_pause_alone() -> None:
    world = World(cfg())
    world.verdict = None
    world.until(lambda p: p.state.phase == "Healthy")
    assert world.state.stable == NEW


def test_a_restart_resumes_from_status() -> None:
    """The state written to .status and read back gives the same plan (restart mid-step)."""
    world = World(cfg(analysis=True, interval_s=5))
    for _ in range(8):
        world.tick()
    assert world.state.step >= 0 and world.state.canary == NEW
    restored = from_status(to_status(world.state))
    assert restored == replace(world.state, **{
        f: int(getattr(world.state, f)) if getattr(world.state, f) is not None else None
        for f in ("scaled_at", "step_started_at", "analysed_at")})
    a = advance(world.config, 4, NEW, world.state, world.seen, world.now + 1)
    b = advance(world.config, 4, NEW, restored, world.seen, world.now + 1)
    assert (a.stable, a.canary, a.weight, a.state.step, a.state.phase) == (
        b.stable, b.canary, b.weight, b.state.step, b.state.phase)


def test_ticks_are_idempotent() -> None:
    world = World(cfg())
    world.tick()
    again = advance(world.config, 4, NEW, world.state, world.seen, world.now)
    assert "RolloutStarted" not in [e.reason for e in again.events]


# ---- controls ----------------------------------------------------------------------------

def test_pause_forever_until_promote_and_ids_act_once() -> None:
    world = World(cfg(steps=(Step(25, until_promoted=True), Step(50, until_promoted=True))))
    for _ in range(30):
        world.tick()
    assert world.state.phase == "Paused" and world.state.pause_reason == "StepPause"
    assert world.state.step == 0
    world.config = replace(world.config, promote_id="p1")
    world.tick()
    assert world.state.step == 1 and world.events.count("StepPromoted") == 1
    for _ in range(10):  # the same id again: nothing
        world.tick()
    assert world.state.step == 1 and world.events.count("StepPromoted") == 1
    world.config = replace(world.config, promote_id="p2")
    world.until(lambda p: p.state.phase == "Healthy")
    assert world.state.stable == NEW


def test_promote_full_skips_the_remaining_steps() -> None:
    world = World(cfg(analysis=True))
    world.tick()
    world.config = replace(world.config, promote_id="p", promote_full=True)
    plan = world.tick()
    assert plan.state.phase == "Promoting" and "Promoted" in world.events
    world.until(lambda p: p.state.phase == "Healthy")
    assert world.events.count("StepCompleted") == 0


@pytest.mark.parametrize("at_step", [0, 1, 2, 3])  # 3: mid-promotion
def test_abort_at_every_step_rolls_back_and_retry_starts_over(at_step: int) -> None:
    world = World(cfg(analysis=True, interval_s=1))
    world.until(lambda p: p.state.step == min(at_step, 2))
    if at_step == 3:  # the stable track is rolling to the new version when abort comes
        world.ready = False
        world.until(lambda p: p.state.phase == "Promoting")
    world.config = replace(world.config, abort=True)
    plan = world.tick()
    assert plan.state.phase == "RolledBack" and plan.state.aborted
    assert plan.canary is not None and plan.canary.replicas == 0
    assert plan.stable.version == OLD and plan.stable.replicas == 4
    assert "aborted by a user" in plan.state.message
    world.config = replace(world.config, abort=False)
    for _ in range(5):  # spec still names NEW: stays rolled back
        assert world.tick().state.phase == "RolledBack"
    world.config = replace(world.config, retry="r1")
    world.ready = True
    plan = world.tick()
    assert plan.state.step == 0 and not plan.state.aborted and "RolloutRetried" in world.events
    world.until(lambda p: p.state.phase == "Healthy")


def test_a_stale_retry_id_does_nothing() -> None:
    world = World(cfg(), replicas=4)
    world.state = RolloutState(stable=OLD, canary=NEW, aborted=True, last_retry="r1",
                               phase="RolledBack")
    world.config = replace(world.config, retry="r1")
    assert world.tick().state.phase == "RolledBack"


def test_user_pause_holds_without_analysis_and_resume_continues() -> None:
    world = World(cfg(analysis=True, interval_s=1))
    world.tick()
    world.config = replace(world.config, paused=True)
    for _ in range(30):
        world.tick()
        assert world.measured == 0  # paused: no analysis
    assert world.state.phase == "Paused" and world.state.pause_reason == "UserPaused"
    assert world.state.step == 0
    world.config = replace(world.config, paused=False)
    world.until(lambda p: p.state.step == 1)
    assert "Resumed" in world.events


def test_a_new_revision_mid_canary_restarts_against_the_same_stable() -> None:
    world = World(cfg())
    world.until(lambda p: p.state.step == 1)
    plan = world.tick(desired="rev-newer")
    assert plan.state.step == 0 and plan.state.canary == "rev-newer"
    assert plan.stable.version == OLD and world.events[-1] == "RolloutRestarted"


def test_editing_the_spec_back_clears_the_rollout() -> None:
    world = World(cfg())
    world.until(lambda p: p.state.step == 1)
    plan = world.tick(desired=OLD)
    assert plan.canary is None and plan.state.canary is None
    assert plan.stable.version == OLD and plan.stable.replicas == 4
    assert "RolloutCleared" in world.events
    assert world.tick(desired=OLD).state.phase == "Healthy"  # once the stable track is whole


# ---- analysis verdicts ---------------------------------------------------------------------

def test_failed_analysis_rolls_back_with_the_reason() -> None:
    world = World(cfg(analysis=True, interval_s=1, failure_limit=1))
    world.tick()
    world.verdict = "Failed"
    plan = world.until(lambda p: p.state.phase == "RolledBack")
    assert plan.state.failed == 2  # limit 1: the second failure rolls back
    assert "tokensPerSecond Failed" in plan.state.message and "AnalysisFailed" in plan.state.message
    assert plan.canary.replicas == 0 and plan.stable.replicas == 4
    assert any(e.type == "Warning" and e.reason == "RolledBack" for e in plan.events)


def test_failed_analysis_without_automatic_rollback_pauses_until_resumed() -> None:
    world = World(cfg(analysis=True, interval_s=1, automatic_rollback=False))
    world.verdict = "Failed"
    world.until(lambda p: p.state.phase == "Paused")
    assert world.state.pause_reason == "AnalysisFailed" and not world.state.aborted
    for _ in range(5):
        world.tick()
        assert world.measured == 0  # held: no analysis, no advance
    world.verdict = "Successful"
    world.config = replace(world.config, resume="s1")
    world.until(lambda p: p.state.step == 1)
    assert "Resumed" in world.events


@pytest.mark.parametrize("policy, phase", [("Pause", "Paused"), ("Rollback", "RolledBack"),
                                           ("Promote", "Progressing")])
def test_each_inconclusive_policy(policy: str, phase: str) -> None:
    world = World(cfg(analysis=True, interval_s=1, inconclusive_limit=2,
                      inconclusive_policy=policy))
    world.verdict = "Inconclusive"
    plan = world.until(lambda p: p.state.inconclusive > 2 or p.state.step > 0
                       or p.state.phase == "RolledBack")
    if policy == "Promote":
        world.until(lambda p: p.state.step >= 1)
    else:
        assert plan.state.phase == phase
        if policy == "Pause":
            assert plan.state.pause_reason == "Inconclusive"
    assert "AnalysisInconclusive" in world.events or "RolledBack" in world.events


def test_errors_alone_never_roll_back() -> None:
    world = World(cfg(analysis=True, interval_s=1, error_limit=3, inconclusive_limit=1,
                      inconclusive_policy="Rollback"))
    world.verdict = "Error"
    for _ in range(6):
        world.tick()
    assert world.state.phase != "RolledBack"
    assert world.state.errors >= 1 and world.state.inconclusive <= 1
    # past the error limit twice over, errors count as inconclusive: the policy applies
    plan = world.until(lambda p: p.state.phase == "RolledBack", limit=60)
    assert "InconclusiveAnalysis" in plan.state.message


def test_one_success_resets_the_consecutive_error_count() -> None:
    world = World(cfg(analysis=True, interval_s=1, error_limit=3))
    world.verdict = "Error"
    for _ in range(4):
        world.tick()
    assert world.state.errors >= 2
    world.verdict = "Successful"
    world.tick()
    assert world.state.errors == 0


# ---- the progress deadline -----------------------------------------------------------------

@pytest.mark.parametrize("rollback, phase", [(True, "RolledBack"), (False, "Paused")])
def test_the_progress_deadline_fails_the_step(rollback: bool, phase: str) -> None:
    world = World(cfg(progress_deadline_s=60, automatic_rollback=rollback), ready=False)
    plan = world.until(lambda p: p.state.phase in ("RolledBack", "Paused"), dt=5)
    assert plan.state.phase == phase
    assert "ProgressDeadlineExceeded" in plan.state.message or \
        plan.state.pause_reason == "ProgressDeadlineExceeded"
    assert world.now - 1000 > 60


# ---- the controls' patches -------------------------------------------------------------------

def test_each_control_is_one_merge_patch() -> None:
    patches = {a: controls.patch(a, "alice", "id-1") for a in controls.ACTIONS}
    assert patches["promote"]["spec"] == {"rollout": {"promote": {"id": "id-1", "full": False}}}
    assert patches["promote-full"]["spec"] == {"rollout": {"promote": {"id": "id-1",
                                                                       "full": True}}}
    assert patches["pause"]["spec"] == {"rollout": {"paused": True}}
    assert patches["resume"]["spec"] == {"rollout": {"paused": False, "resume": "id-1"}}
    assert patches["abort"]["spec"] == {"rollout": {"abort": True}}
    assert patches["retry"]["spec"] == {"rollout": {"abort": False, "paused": False,
                                                    "retry": "id-1"}}
    for action, body in patches.items():
        annotations = body["metadata"]["annotations"]
        assert annotations[controls.ACTOR_ANNOTATION] == "alice"
        assert annotations[controls.ACTION_ANNOTATION] == f"{action} id-1"
    assert controls.new_id() != controls.new_id()
    with pytest.raises(ValueError):
        controls.patch("rewind", "alice")  # type: ignore[arg-type]


def test_control_patches_drive_the_state_machine() -> None:
    """The patch a user sends, merged into the spec, is what the state machine acts on."""
    spec = {"strategy": "Canary", "steps": [{"weight": 50, "pause": {}}, {"weight": 100}]}
    world = World(Config.from_spec(RolloutSpec.model_validate(spec)))
    world.until(lambda p: p.state.pause_reason == "StepPause")
    merged = {**spec, **controls.patch("promote", "bob", "x")["spec"]["rollout"]}
    world.config = Config.from_spec(RolloutSpec.model_validate(merged))
    world.until(lambda p: p.state.phase == "Healthy")
    assert world.state.last_promote_id == "x"


def test_the_state_is_exactly_the_crds_status_rollout() -> None:
    """Every field the state machine keeps has a place in the CRD (status is structural:
    an undeclared field would be pruned, and the rollout could not resume)."""
    from specd.api.spec import RolloutStatus

    written = to_status(RolloutState(stable=OLD, canary=NEW, scaled_at=1.0))
    declared = set(RolloutStatus().model_dump(by_alias=True))
    assert set(written) | {"setWeight"} == declared  # setWeight: children.rollout_status
    assert RolloutStatus.model_validate(written).canary_version == NEW
