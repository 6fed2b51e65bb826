"""The JSON report: round trip and atomic rewrites."""

from __future__ import annotations

from pathlib import Path

from agentlightning.algorithm.apo.report import APOReport, CandidateRecord, RoundRecord, write_report


def _report() -> APOReport:
    return APOReport(
        config={"beam_width": 2},
        resource_name="prompt",
        started_at=1.0,
        seed_version="v0",
        best_version="v0",
        best_template="Answer {q}",
        candidates=[CandidateRecord(version="v0", round=0, template="Answer {q}", engine="f-string")],
    )


def test_report_round_trips_and_is_rewritten_atomically(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "report.json"
    report = _report()
    write_report(report, path)
    assert APOReport.model_validate_json(path.read_text()) == report

    report.rounds.append(RoundRecord(round=1, parents=["v0", "v0"], beam=["v0"]))
    report.status = "finished"
    write_report(report, path)
    loaded = APOReport.model_validate_json(path.read_text())
    assert loaded.status == "finished" and loaded.rounds[0].parents == ["v0", "v0"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.json"]  # no temp files left behind
