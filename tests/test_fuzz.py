"""Fuzzing (tests/fuzz.py, seeded): 520 mutated job files and 20 truncations, 200 bit flips, every hostile
case, 6 AOTInductor package shapes, 14 configs naming code and 5 weight dtypes of a checkpoint, and 240
mutations of a real job's run record (the JSON `aitune-ray report` reads).
`python -m tests.fuzz` prints the same counts."""

from __future__ import annotations

import logging

import pytest

from tests import fuzz

logger = logging.getLogger(__name__)


def test_every_mutated_job_file_is_refused_with_one_line_naming_the_key(tmp_path):
    counts, failures = fuzz.fuzz_jobs(tmp_path)
    logger.warning("%s", fuzz.table("job file fuzz", counts))
    assert not failures, "\n\n".join(failures)
    assert counts["mutations"] >= 500 and counts["clear"] == counts["mutations"]
    assert all(counts[f"kind {k}"] >= 80 for k in ("wrong_type", "unknown_key", "missing_key", "huge_number",
                                                     "bad_import", "yaml_error"))


def test_damaged_and_hostile_checkpoints_never_crash_hang_import_or_load_silently(tmp_path):
    counts, failures = fuzz.fuzz_checkpoints(tmp_path)
    logger.warning("%s", fuzz.table("checkpoint fuzz", counts))
    assert not failures, "\n".join(failures)
    assert counts["truncation: refused"] == 20
    assert counts["bit flip: refused"] + counts["bit flip: identical"] == 200
    assert counts["crash"] == counts["hang"] == counts["import"] == counts["silent"] == 0
    assert counts["hostile archive: refused"] == len(fuzz.hostile_archive_names())
    assert counts["AOTInductor package: refused"] == len(fuzz.package_shapes(tmp_path)) == 6
    assert counts["config naming code: refused"] == len(fuzz.config_shapes(tmp_path)) == 14
    assert counts["weights of another dtype: refused"] == 5


def test_the_command_answers_a_bad_job_with_one_line_and_exit_code_2(tmp_path, capsys):
    from aitune_ray.command import cli

    by_kind = {}
    for case in fuzz.job_cases():
        by_kind.setdefault(case.kind, []).append(case)
    for case in [c for cases in by_kind.values() for c in cases[:2]]:
        path = tmp_path / "job.yaml"
        path.write_text(case.text)
        assert cli.main(["tune", str(path)]) == cli.EXIT_BAD_JOB, case.text
        out, err = capsys.readouterr()
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and case.key in lines[0], (case.kind, err)
        assert "Traceback" not in out + err


@pytest.fixture(scope="module")
def run_record(tmp_path_factory):
    """The JSON report of a quick real job (inline, CPU)."""
    import sys

    from tests.report_helpers import REPO, run_quick_job

    sys.path.insert(0, str(REPO))
    return run_quick_job(tmp_path_factory.mktemp("run")).with_suffix(".json")


def test_every_mutated_run_record_renders_or_is_refused_with_one_line(run_record, tmp_path):
    counts, failures = fuzz.fuzz_run_records(run_record, tmp_path)
    logger.warning("%s", fuzz.table("run record fuzz", counts))
    assert not failures, "\n".join(failures)
    assert counts["rendered"] + counts["refused"] == counts["mutations"] == 240
    assert counts["refused"] >= 80 and all(counts[f"kind {k}"] == 40 for k in fuzz.RUN_KINDS)


def test_the_report_command_answers_a_mutated_run_record_with_exit_0_or_one_line_and_exit_2(run_record, tmp_path,
                                                                                             capsys):
    import json

    from aitune_ray.command import cli

    cases = fuzz.run_record_cases(json.loads(run_record.read_text()), count=36)
    for index, (kind, where, data) in enumerate(cases):
        path = tmp_path / f"case-{index}" / "run.json"
        path.parent.mkdir()
        path.write_bytes(data)
        code = cli.main(["report", str(path)])
        out, err = capsys.readouterr()
        lines = [line for line in err.splitlines() if line.strip()]
        assert "Traceback" not in out + err, (kind, where, err)
        assert (code, lines) == (cli.EXIT_OK, []) or (code == cli.EXIT_BAD_JOB and len(lines) == 1
                                                      and lines[0].startswith("error:")), (kind, where, code, err)
