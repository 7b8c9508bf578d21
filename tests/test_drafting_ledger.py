"""The drafting ledger: drafting rounds priced against the same engine's plain rounds of the
same shape, nearest in order (pure; recorded rounds, no model)."""

from __future__ import annotations

import pytest

from specd.worker.bench.drafting_ledger import Ledger, Round, drafting_ledger


def plain(rows: int, seconds: float, clean: bool = True) -> Round:
    return Round(rows, False, seconds, rows, clean)


def drafted(rows: int, seconds: float, committed: int, clean: bool = True) -> Round:
    return Round(rows, True, seconds, committed, clean)


def test_a_drafting_round_is_priced_per_token_against_plain_rounds_of_its_shape():
    # plain rounds of 4 rows: 0.4 s for 4 tokens (0.1 s a token). The drafting round took
    # 0.6 s for 5 tokens: 0.1 s beyond the 0.5 s plain rounds would have taken for them
    rounds = [plain(4, 0.4), plain(4, 0.4), drafted(4, 0.6, 5), plain(4, 0.4)]
    ledger = drafting_ledger(rounds)
    assert (ledger.drafted, ledger.priced) == (1, 1)
    assert ledger.excess_seconds == pytest.approx(0.1)
    assert ledger.seconds == pytest.approx(1.8)
    assert ledger.excess_share() == pytest.approx(0.1 / 1.8)
    # a drafting round that commits enough tokens saves time: a negative excess
    win = drafting_ledger([plain(4, 0.4), drafted(4, 0.6, 8)])
    assert win.excess_seconds == pytest.approx(0.6 - 0.8)


def test_prices_come_from_the_nearest_plain_rounds_not_the_whole_run():
    # the machine slows down half-way: the drafting round late in the run is priced against
    # the slow plain rounds around it, so drafting that cost nothing reads as nothing
    fast, slow = [plain(8, 0.8)] * 20, [plain(8, 1.6)] * 20
    ledger = drafting_ledger(fast + slow + [drafted(8, 1.6, 8)] + slow, neighbours=8)
    assert ledger.excess_seconds == pytest.approx(0.0)
    # against every plain round of the run (1.33 s a round on average) it would read as a loss
    assert drafting_ledger(fast + slow + [drafted(8, 1.6, 8)] + slow,
                           neighbours=100).excess_seconds == pytest.approx(1.6 - 80 / 60)


def test_rounds_of_another_shape_are_counted_not_priced():
    rounds = [plain(4, 0.4), plain(4, 0.9, clean=False),  # a prefill chunk beside the rows
              drafted(3, 0.5, 4),  # no plain round of 3 rows ran
              drafted(4, 0.9, 6, clean=False)]  # a drafting round with a prefill chunk
    ledger = drafting_ledger(rounds)
    assert (ledger.drafted, ledger.priced, ledger.excess_seconds) == (2, 0, 0.0)
    assert ledger.excess_share() is None  # nothing priced: no reading, not "free"
    assert drafting_ledger([plain(4, 0.4)]).excess_share() is None  # never drafted


def test_ledgers_of_slices_and_passes_add_up():
    a = drafting_ledger([plain(2, 0.2), drafted(2, 0.3, 2)])
    b = drafting_ledger([plain(2, 0.2), drafted(2, 0.2, 4), drafted(5, 1.0, 6)])
    total = a + b
    assert (total.drafted, total.priced) == (3, 2)
    assert total.excess_seconds == pytest.approx(0.1 + (0.2 - 0.4))
    assert total.seconds == pytest.approx(0.5 + 1.4)
    assert Ledger() + a == a
