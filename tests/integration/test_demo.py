"""`make demo DEMO_ONCE=1` end to end: the story of specd_dev.demo on its own local cluster
(the chart's operator and dashboard as pods, real workers, Prometheus, PostgreSQL), exiting
0 only if every stage happened as expected: Scheme A Ready, the canary to Scheme B promoted
on its analysis, the bad revision rolled back by the lossless probes, a tuner decision for
the group that drafts badly, no failed request. About ten minutes on a 2-core machine:
``make test-demo``, not part of ``make test`` (each stage has an e2e test of its own)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.demo]


def test_the_demo_story_runs_to_the_end() -> None:
    run = subprocess.run([sys.executable, "-m", "specd_dev.demo", "--once",
                          "--name", "specd-demo-test"],
                         capture_output=True, text=True, timeout=1800)
    out = run.stdout
    assert run.returncode == 0, out[-6000:] + run.stderr[-3000:]
    assert re.search(r"dashboard: http://127\.0\.0\.1:\d+", out)
    for stage in range(1, 7):
        assert f"== {stage}/6" in out
    assert "- Scheme B promoted" in out
    assert "- the bad revision rolled back: AnalysisFailed" in out and "lossless" in out
    assert "- the tuner: code " in out
    assert "history store: code " in out or "- the tuner: code held on data" in out
    assert "NOT AS EXPECTED" not in out and "torn down" in out
    print(out[out.index("== 6/6"):])
