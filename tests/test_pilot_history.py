"""`specd pilot record`: a reported run's verdicts into the history store, once, read back
for people and drawn on the dashboard's Pilot page. The run is the committed pilot on the
embedded model (docs/pilot/smollm2-cpu-fp32), its report.json and run.json as written."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specd.cli import main as specd_main
from specd.operator.history import read as history_read
from specd.pilot import history

RUN = Path(__file__).resolve().parents[1] / "docs" / "pilot" / "smollm2-cpu-fp32"
APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("report.json", "run.json"):
        shutil.copy(RUN / name, folder / name)
    return folder


def test_one_row_per_task_group_with_the_reports_reasons_and_evidence() -> None:
    report, run = history.read_run(RUN)
    rows = history.verdict_rows(report, run)
    by_group = {r["task_group"]: r for r in rows}
    assert sorted(by_group) == sorted(g for g in report["verdicts"] if not g.startswith("_"))
    assert "all" in by_group  # every group together is a verdict of its own
    for group, row in by_group.items():
        found = report["verdicts"][group]
        assert row["decision"] == found["decision"] and row["reasons"] == found["reasons"]
        assert row["evidence"]["traces"] == found["traces"]
        assert row["pilot"] == report["pilot"]["name"]
        assert row["started_at"] == datetime.fromtimestamp(run["started"], UTC)
        assert row["regression_ok"] is report["regression"]["ok"]
        assert row["candidate"] == report["pilot"]["groups"]["G1"]["description"]
    crossing = [r for r in rows if r["crossover_rps"] is not None]
    assert all(r["decision"] == "low-load only" for r in crossing)


def test_a_folder_without_a_report_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(history.NotARun, match="no report.json"):
        history.read_run(tmp_path)
    report, run = history.read_run(RUN)
    with pytest.raises(history.NotARun, match="no start time"):
        history.verdict_rows(report, {k: v for k, v in run.items() if k != "started"})


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    return request.getfixturevalue("postgres")


def test_recorded_once_whatever_the_retries_and_read_back(run_dir: Path, url: str) -> None:
    report = json.loads((run_dir / "report.json").read_text())
    groups = len([g for g in report["verdicts"] if not g.startswith("_")])
    assert history.record(run_dir, url) == (groups, groups)
    assert history.record(run_dir, url) == (0, groups)  # the natural key: written before
    found = history_read.pilot_verdicts(url)
    assert len(found) == groups
    assert [r.task_group for r in found] == sorted(r.task_group for r in found)
    long_form = next(r for r in found if r.task_group == "long-form")
    assert long_form.decision == report["verdicts"]["long-form"]["decision"]
    assert long_form.crossover_rps == pytest.approx(
        report["verdicts"]["long-form"]["crossover_rps"])
    assert long_form.reasons == tuple(report["verdicts"]["long-form"]["reasons"])
    assert long_form.started_at.tzinfo is not None
    # a later run of the same pilot comes first
    run = json.loads((run_dir / "run.json").read_text())
    run["started"] += 86400
    (run_dir / "run.json").write_text(json.dumps(run))
    assert history.record(run_dir, url) == (groups, groups)
    newest = history_read.pilot_verdicts(url, limit=1)[0]
    assert newest.started_at == datetime.fromtimestamp(run["started"], UTC)
    assert len(history_read.pilot_verdicts(url, pilot="another pilot")) == 0


def test_specd_pilot_record_on_the_command_line(run_dir: Path, tmp_path: Path,
                                                capsys) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert specd_main(["pilot", "record", str(run_dir), "--history-url", url]) == 0
    assert "5 of 5 verdicts written" in capsys.readouterr().out
    assert specd_main(["pilot", "record", str(run_dir), "--history-url", url]) == 0
    assert "0 of 5 verdicts written (recorded before)" in capsys.readouterr().out
    assert specd_main(["pilot", "record", str(tmp_path / "nothing"), "--history-url",
                       url]) == 2
    assert "no report.json" in capsys.readouterr().err
    assert specd_main(["pilot", "record", str(run_dir), "--history-url", "not a url"]) == 2
    assert "--history-url: not a database URL" in capsys.readouterr().err
    dead = "postgresql+psycopg://u:secret@127.0.0.1:1/x"
    assert specd_main(["pilot", "record", str(run_dir), "--history-url", dead]) == 2
    err = capsys.readouterr().err
    assert "history store" in err and "secret" not in err  # no password in the message


def test_the_pilot_page_shows_the_verdicts(run_dir: Path, tmp_path: Path,
                                           monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    monkeypatch.setenv("SPECD_HISTORY_URL", url)
    history.record(run_dir, url)
    at = AppTest.from_string(
        "from specd.dashboard import app\napp.pilot_page()\n", default_timeout=60).run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Pilot"
    table = at.dataframe[0].value
    assert sorted(table["task group"]) == ["all", "chat", "code", "long-form", "structured"]
    row = table[table["task group"] == "long-form"].iloc[0]
    assert row["decision"] == "low-load only" and row["crossover (req/s)"] == "0.633"
    assert row["regression"] == "passed" and "crossover at" in row["why"]
    monkeypatch.delenv("SPECD_HISTORY_URL")
    empty = AppTest.from_string(
        "from specd.dashboard import app\napp.pilot_page()\n", default_timeout=60).run()
    assert any("no history store configured" in w.value for w in empty.warning)
