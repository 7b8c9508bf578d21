"""The draft gate on its own: recorded round outcomes in, draft-or-not out (no model)."""

from __future__ import annotations

from specd.api.policy import Policy
from specd.worker.engine.draft_gate import DraftGate, RoundOutcome, bucket
from specd.worker.engine.scheduler import CostTable

POLICY = Policy(mode="scheduled", k_max=4, survival_floor=0.0)
FREE = CostTable.from_measurements([1, 64], [1.0, 1.01])  # verifying costs almost nothing
STEEP = CostTable.from_measurements([1, 2, 64], [1.0, 50.0, 60.0])  # one more token: 50x


def learnt(costs: CostTable, conf: float = 0.9, draft_s: float = 0.01,
           sizes: tuple[int, ...] = (1,)) -> DraftGate:
    gate = DraftGate(costs)
    for n in sizes:
        gate.learn(n, [[conf] * 4] * n, draft_s)
    return gate


def measured_both(gate: DraftGate, n: int, drafting_wins: bool) -> DraftGate:
    """Both kinds of round recorded often enough to compare, at batch size ``n``."""
    for _ in range(gate.outcomes.min_rounds):
        gate.record(RoundOutcome(n, True, 1.0 if drafting_wins else 3.0, 2 * n, 3 * n))
        gate.record(RoundOutcome(n, False, 1.0, n, 0))
    return gate


def run(gate: DraftGate, n: int, rounds: int, measured: bool = True) -> list[bool]:
    return [gate.choose(POLICY, [POLICY] * n, n, n, measured).draft for _ in range(rounds)]


def test_nothing_learnt_drafts_to_learn_and_no_scheduled_request_never_drafts() -> None:
    gate = DraftGate(FREE)
    assert gate.choose(POLICY, [POLICY], 1, 1, True).draft
    assert not gate.choose(POLICY, [], 1, 1, True).draft


def test_the_prediction_follows_the_cost_table() -> None:
    assert learnt(FREE).predict(POLICY, [POLICY], 1, 1) is True
    assert learnt(STEEP).predict(POLICY, [POLICY], 1, 1) is False
    # confident drafts that take longer than the forward they save do not pay either
    assert learnt(FREE, draft_s=10.0).predict(POLICY, [POLICY], 1, 1) is False


def test_once_measured_a_predicted_gain_drafts_only_on_a_clear_win() -> None:
    """FREE predicts a gain; the measurement decides once both kinds have their rounds: a
    loss or a break-even (a win under ``WIN_MARGIN``) keeps the round plain."""
    def after(drafting_seconds: float, tokens: int) -> DraftGate:
        gate = learnt(FREE)
        assert gate.predict(POLICY, [POLICY], 1, 1) is True
        for _ in range(gate.outcomes.min_rounds):
            gate.record(RoundOutcome(1, True, drafting_seconds, tokens, 3))
            gate.record(RoundOutcome(1, False, 1.0, 1, 0))  # plain: 1 s a token
        return gate

    def choice(gate: DraftGate):
        return gate.choose(POLICY, [POLICY], 1, 1, measured=False)

    assert choice(after(1.2, 3)).draft is True  # 0.4 s a token
    losing = choice(after(3.0, 1))
    assert losing.draft is False and "cost more" in losing.why
    marginal = after(3 * (1 - DraftGate.WIN_MARGIN / 2), 3)  # 2.5 % cheaper a token
    assert marginal.outcomes.drafting_wins(1) is True
    assert choice(marginal).draft is False and "too little" in choice(marginal).why
    # too few rounds measured: the prediction stands
    early = learnt(FREE)
    early.record(RoundOutcome(1, True, 3.0, 1, 3))
    early.record(RoundOutcome(1, False, 1.0, 1, 0))
    assert early.choose(POLICY, [POLICY], 1, 1, measured=False).draft is True


def test_a_clear_measured_win_overrules_a_predicted_loss_a_marginal_one_does_not() -> None:
    """A start-up table that prices verification too high (STEEP) predicts no gain; rounds
    that drafted anyway (probes) committed more per second: the measurement decides. Near
    break-even (within ``WIN_MARGIN``) the prediction's plain round stands."""
    def after(drafting_seconds: float) -> DraftGate:
        gate = learnt(STEEP, sizes=(1, 4))
        assert gate.predict(POLICY, [POLICY], 1, 1) is False
        for _ in range(gate.outcomes.min_rounds):
            gate.record(RoundOutcome(1, True, drafting_seconds, 2, 3))  # 2 tokens a round
            gate.record(RoundOutcome(1, False, 1.0, 1, 0))
        return gate

    clear = after(1.2)  # 0.6 s a token against plain's 1.0
    choice = clear.choose(POLICY, [POLICY], 1, 1, measured=False)
    assert choice.draft is True and choice.why.startswith("measured")
    marginal = after(2 * (1 - DraftGate.WIN_MARGIN / 2))  # 2.5 % cheaper a token
    assert marginal.outcomes.drafting_wins(1) is True
    assert marginal.choose(POLICY, [POLICY], 1, 1, measured=False).draft is False
    losing = after(3.0)
    assert losing.choose(POLICY, [POLICY], 1, 1, measured=False).draft is False
    # another batch size has measured nothing: its prediction stands
    assert clear.choose(POLICY, [POLICY] * 4, 4, 4, measured=False).why == "predicted gain"


def test_drafting_rounds_that_verified_no_draft_never_read_as_a_win() -> None:
    """make test: a batch of one whose schedule verified nothing read drafting rounds a few
    per cent cheaper than plain ones (noise: both committed one token) and drafted every
    round from then on, 143 drafted tokens, none verified."""
    gate = learnt(STEEP)
    for _ in range(gate.outcomes.min_rounds):
        gate.record(RoundOutcome(1, True, 0.8, 1, 0))  # "cheaper", one token, none verified
        gate.record(RoundOutcome(1, False, 1.0, 1, 0))
    assert gate.outcomes.drafting_wins(1, DraftGate.WIN_MARGIN) is True  # what it measured
    choice = gate.choose(POLICY, [POLICY], 1, 1, measured=False)
    assert choice.draft is False and "verified no draft" in choice.why
    # one drafting round that verified a draft among the last ones: the measured win stands
    gate.record(RoundOutcome(1, True, 1.6, 2, 3))
    gate.record(RoundOutcome(1, False, 1.0, 1, 0))
    assert gate.choose(POLICY, [POLICY], 1, 1, measured=False).draft is True


def test_a_run_of_rejected_drafts_is_priced_not_read_as_no_gain() -> None:
    """A bench run at one request: 8 drafting rounds in a row had every verified draft
    rejected; a guard on drafts *kept* then left the request plain for hundreds of rounds
    (its probes were rejected too), 0.90x fixed-length drafting. Rejections are the
    drafter's real cost: the measurement prices them, and here the win still stands."""
    gate = measured_both(learnt(FREE), 1, drafting_wins=True)  # 0.5 s a token against 1.0
    for _ in range(gate.outcomes.min_rounds):
        gate.record(RoundOutcome(1, True, 1.05, 1, 3))  # three drafts verified, none kept
        gate.record(RoundOutcome(1, False, 1.0, 1, 0))
    choice = gate.choose(POLICY, [POLICY], 1, 1, measured=False)
    assert choice.draft is True and choice.why == "measured: drafting rounds cost less per token"
    assert gate.outcomes.drafting_wins(1, DraftGate.WIN_MARGIN) is True


def test_probes_stay_within_the_stated_bound_and_thin_out_while_the_decision_holds() -> None:
    gate = measured_both(learnt(STEEP), 1, drafting_wins=False)  # drafting only in probes
    first, long_run = DraftGate.probe_share_bound()
    choices = run(gate, 1, 2000)
    probes = [i for i, drafted in enumerate(choices) if drafted]
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    assert probes[0] == DraftGate.PROBE_EVERY  # after 16 rounds of plain
    assert gaps == sorted(gaps) and gaps[-1] == DraftGate.PROBE_MAX + 1
    assert len(probes) <= first * 2000
    assert sum(choices[-1000:]) <= long_run * 1000 + 1


def test_probes_come_often_until_the_other_choice_is_measured_then_back_off() -> None:
    """A prediction can be wrong; what overrules it is the measured comparison, which needs
    ``min_rounds`` of each kind. Probing at the steady interval until then let a wrong
    decision stand for over a hundred rounds (a bench cell at c=32 drafted at a loss
    throughout); probing often costs at most ``min_rounds`` probes."""
    gate = learnt(STEEP)  # predicted: plain; drafting never measured yet
    need = gate.outcomes.min_rounds
    probes: list[int] = []
    for i in range(20 * (DraftGate.PROBE_EVERY + 1)):
        if gate.choose(POLICY, [POLICY], 1, 1, True).draft:
            probes.append(i)
            gate.record(RoundOutcome(1, True, 3.0, 1, 3))
        else:
            gate.record(RoundOutcome(1, False, 1.0, 1, 0))
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    steady = DraftGate.PROBE_EVERY + 1
    # probe k fires with k - 1 drafting rounds measured: every PROBE_LEARN + 1 rounds until
    # ``need`` are, then the steady interval, then it backs off
    assert probes[0] == DraftGate.PROBE_LEARN
    assert gaps[:need - 1] == [DraftGate.PROBE_LEARN + 1] * (need - 1)
    assert gaps[need - 1:need + 1] == [steady, 2 * DraftGate.PROBE_EVERY + 1]
    assert len(probes) <= gate.max_probes(20 * steady)
    # the comparison is there after need probes: a drafting loss, so it stands as plain
    assert gate.outcomes.drafting_wins(1) is False


def test_a_wrong_prediction_costs_at_most_min_rounds_rounds_of_the_wrong_choice() -> None:
    """Predicted: drafting pays (verifying costs almost nothing); measured: drafting rounds
    cost three times a plain round for the same tokens. The choices alternate until both
    are measured, so the wrong choice runs ``min_rounds`` times, then the measurement
    overrules the prediction and drafting is left to the steady probes."""
    gate = learnt(FREE)
    need = gate.outcomes.min_rounds
    drafted: list[bool] = []
    for _ in range(400):
        draft = gate.choose(POLICY, [POLICY], 1, 1, True).draft
        drafted.append(draft)
        gate.record(RoundOutcome(1, draft, 3.0 if draft else 1.0, 1, 3 if draft else 0))
    assert drafted[:2 * need] == [True, False] * need  # learning: alternate
    assert gate.outcomes.drafting_wins(1) is False
    steady = drafted[2 * need:]
    assert steady[:DraftGate.PROBE_EVERY] == [False] * DraftGate.PROBE_EVERY
    assert sum(steady) <= gate.max_probes(len(steady)) - need


def test_each_situation_keeps_its_own_probe_interval_and_unmeasured_rounds_never_probe() -> None:
    """The decision flips as newcomers' prefills come and go: a shared interval kept falling
    back to the shortest; each (decision, bucket) backs off on its own."""
    # at 16 the measured loss decides, whatever FREE predicts
    gate = measured_both(measured_both(learnt(FREE, sizes=(1, 16)), 1, True), 16, False)
    flips = {1: 0, 16: 0}
    for _ in range(100):
        for n, want in ((1, True), (16, False)):
            flips[n] += run(gate, n, 1)[0] != want
    assert flips == {1: 2, 16: 2}  # after 16, then 32 more, in each situation
    assert not any(run(learnt(STEEP), 1, 200, measured=False))


def test_learning_clears_cached_predictions_and_buckets_are_powers_of_two() -> None:
    gate = learnt(FREE)
    assert gate.predict(POLICY, [POLICY], 1, 1) is True
    gate.learn(1, [[0.9] * 4], 10.0)  # drafting got slow: the old prediction is void
    gate.draft_seconds[1] = 10.0
    assert gate.predict(POLICY, [POLICY], 1, 1) is False
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 16, 17)] == [1, 2, 4, 4, 8, 16, 32]


def test_the_breakdowns_open_gate_drafts_where_the_gate_would_not():
    from specd.worker.bench.round_breakdown import open_gate

    closed = learnt(STEEP)  # predicted: plain
    assert closed.choose(POLICY, [POLICY], 1, rows=1, measured=True).draft is False
    opened = open_gate(closed)
    assert opened.costs is closed.costs and opened.outcomes is closed.outcomes
    assert all(opened.choose(POLICY, [POLICY], 1, rows=1, measured=True).draft
               for _ in range(40))  # no probe the other way either


def test_once_measured_the_prediction_is_not_computed() -> None:
    """The measurement decides once both kinds have their rounds, so the gate does not price
    the prediction (a schedule over the batch) in those rounds; before that it does."""
    gate = learnt(FREE)
    asked: list[int] = []
    predict = gate.predict

    def counting(*args, **kwargs):
        asked.append(1)
        return predict(*args, **kwargs)

    gate.predict = counting  # type: ignore[method-assign]
    assert gate.choose(POLICY, [POLICY], 1, 1, measured=False).why == "predicted gain"
    assert len(asked) == 1
    measured_both(gate, 1, drafting_wins=True)
    choice = gate.choose(POLICY, [POLICY], 1, 1, measured=False)
    assert choice.draft and choice.why.startswith("measured") and len(asked) == 1
