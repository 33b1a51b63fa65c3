"""The report's worker-log links: each opens a copy beside the report with the log's content; an empty log or
one that is gone is linked nowhere."""

from __future__ import annotations

from aitune_ray.report.logs import keep_logs


def test_only_logs_with_content_are_linked_and_copied(tmp_path):
    (tmp_path / "full.log").write_text("build started\nTraceback: ...\n")
    (tmp_path / "empty.log").write_text("")
    results = [{"log_path": str(tmp_path / name)} for name in ("full.log", "empty.log", "gone.log")]
    run = {"report": {"modules": [{"results": results}]}}
    folder = tmp_path / "report" / "mlp-logs"
    folder.mkdir(parents=True)
    kept = keep_logs(run, folder, tmp_path)
    assert [r["log_path"] for r in kept["report"]["modules"][0]["results"]] == ["mlp-logs/full.log", "", ""]
    assert sorted(p.name for p in folder.iterdir()) == ["full.log"]
    assert (folder / "full.log").read_text() == "build started\nTraceback: ...\n"
