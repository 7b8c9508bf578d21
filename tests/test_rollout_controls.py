"""Which rollout controls act in which state (pure), as the dashboard enables its buttons."""

from __future__ import annotations

import pytest

from specd.operator.rollout.controls import ACTIONS, available


def service(strategy: str = "Canary", phase: str | None = None, aborted: bool = False,
            abort_asked: bool = False) -> dict:
    return {"spec": {"rollout": {"strategy": strategy, "abort": abort_asked}},
            "status": {"rollout": {"phase": phase, "aborted": aborted} if phase else {}}}


@pytest.mark.parametrize("phase, expected", [
    ("Progressing", {"promote", "promote-full", "pause", "abort"}),
    ("Paused", {"promote", "promote-full", "resume", "abort"}),
    ("Promoting", {"abort"}),
    ("RolledBack", {"retry"}),
    ("Healthy", set()),
])
def test_controls_by_phase(phase: str, expected: set[str]) -> None:
    assert set(available(service(phase=phase))) == expected
    assert set(available(service(phase=phase))) <= set(ACTIONS)


def test_no_controls_without_a_canary_and_retry_after_an_abort() -> None:
    assert available(service("RollingUpdate", "Progressing")) == ()
    assert available(service(phase=None)) == ()  # never reconciled yet
    assert available(service(phase="Progressing", aborted=True)) == ("retry",)
    assert available(service(phase="Progressing", abort_asked=True)) == ("retry",)
