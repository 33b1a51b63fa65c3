"""benchmarks/decisions.py end to end on the CPU (one quick tuning of the tiny ViT): the user's speedup, its
repeat and the best single candidate come from the loops the harness ran, and the summary counts its rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def decisions_run(tmp_path_factory):
    sys.path.insert(0, str(REPO / "benchmarks"))
    sys.path.insert(0, str(REPO))
    import decisions

    out = tmp_path_factory.mktemp("decisions")
    argv = ["decisions.py", "--out", str(out), "--device", "cpu", "--backends", "jit,ao-int8wo", "--runs", "1",
            "--calls", "10", "--repeats", "3", "--rounds", "20"]
    saved = sys.argv
    sys.argv = argv
    try:
        assert decisions.main() == 0
    finally:
        sys.argv = saved
    return decisions, json.loads((out / "decisions.json").read_text())["runs"][0], (out / "decisions.md").read_text()


def test_the_users_speedup_and_its_repeat_come_from_two_loops_of_eager_against_the_deployed_module(decisions_run):
    decisions, run, _ = decisions_run
    first, again = run["user_passes_ms"]
    assert set(first) == set(again) == {"eager", "eager again", "deployed"}   # nothing else in the user's loop
    assert first != again                                                    # two loops, two readings
    for row in run["rows"]:
        bs = str(row["bs"])
        assert row["user_speedup"] == pytest.approx(first["eager"][bs] / first["deployed"][bs])
        assert row["user_aa"] == pytest.approx(first["eager"][bs] / first["eager again"][bs])
        assert row["user_again"] == pytest.approx(again["eager"][bs] / again["deployed"][bs])
        assert row["user_vs_user"] == pytest.approx(row["user_speedup"] / row["user_again"] - 1.0)
        assert row["user_repeats_agree"] == (abs(row["user_vs_user"]) <= decisions.AGREE_LIMIT)
        low = min(row["user_speedup"], row["user_again"]) / (1 + decisions.AGREE_LIMIT)
        high = max(row["user_speedup"], row["user_again"]) * (1 + decisions.AGREE_LIMIT)
        assert row["within_user_range"] == (low <= row["tuner_speedup"] <= high)
        assert row["slower_again"] == (not row["eager_kept"] and row["user_again"] < 1 - decisions.SLOWER_LIMIT)
        assert row["agrees"] == (abs(row["tuner_speedup"] / row["user_speedup"] - 1.0) <= decisions.AGREE_LIMIT)


def test_the_candidates_are_timed_beside_the_deployed_module_in_a_loop_of_their_own(decisions_run):
    _, run, _ = decisions_run
    beside = run["beside_ms"]
    assert "deployed" in beside and len(beside) >= 2 and "eager" not in beside
    for row in run["rows"]:
        bs = str(row["bs"])
        others = {name: t[bs] for name, t in beside.items() if name != "deployed"}
        assert row["best_single"] == min(others, key=others.get)
        assert row["deployed_vs_best"] == pytest.approx(beside["deployed"][bs] / others[row["best_single"]] - 1.0)


def test_the_summary_counts_the_rows(decisions_run):
    _, run, text = decisions_run
    rows = run["rows"]
    assert f"within 5% of the user's: {sum(r['agrees'] for r in rows)} of {len(rows)}" in text
    assert f"the user's second loop within 5% of the first: {sum(r['user_repeats_agree'] for r in rows)} of " \
           f"{len(rows)}" in text
    assert (f"within 5% of one of the user's two readings or between them: "
            f"{sum(r['within_user_range'] for r in rows)} of {len(rows)}") in text
    assert (f"the user's second loop measures slower than eager by more than 3%: "
            f"{sum(r['slower_again'] for r in rows)}") in text
    assert "| user again | user vs user |" in text


def test_reread_applies_the_reports_rule_to_a_decisions_file(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import decisions

    def row(bs, remeasure, user, agrees):
        return {"bs": bs, "tuner_speedup": remeasure, "remeasure_speedup": remeasure, "user_speedup": user,
                "agrees": agrees, "remeasure_agrees": agrees}

    # run 1: at bs 8 the re-measure read 3.0x and the post-deploy check 2.0x (moved by far more than the report's
    # SPEEDUP_MOVED), and the user 2.1x (a miss); at bs 32 the two agree and so does the user. Run 2 had no check.
    runs = [{"rows": [row(8, 3.0, 2.1, False), row(32, 1.1, 1.1, True)],
             "deploy_checks": [{"intervals": {"8": {"median": 2.0}, "32": {"median": 1.1}}}]},
            {"rows": [row(8, 1.5, 1.2, False)], "deploy_checks": []}]
    path = tmp_path / "decisions.json"
    path.write_text(json.dumps({"runs": runs}))
    text = decisions.reread([str(path)])
    assert "| decisions.json | 1 | 8 | 3.000x | 2.000x | 2.100x | yes | no |" in text
    assert "| decisions.json | 1 | 32 | 1.100x | 1.100x | 1.100x |  | yes |" in text
    assert "| decisions.json | 2 | 8 | 1.500x | - | 1.200x |  | no |" in text
    assert text.endswith("3 (run, batch size) pairs: the report says the speedup moved at 1, 1 of them outside "
                         "5% of the user; 2 outside 5% in all")
