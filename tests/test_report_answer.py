"""The report's answer, verdicts, host fitness, sentence lengths and kept logs, on decision records built by
hand (no tuning): what the top of the report says, and that nothing in it contradicts the decision."""

from __future__ import annotations

import json
import re

from aitune_ray.report import render_run_file, summary, write_reports
from aitune_ray.report.answer import CHOSEN, LOST, UNDECIDED, answer
from aitune_ray.report.document import blocks, pieces
from aitune_ray.report.tables import module_report

INTERVALS = {"2": {"median": 1.5, "low": 1.3, "high": 1.7}, "8": {"median": 1.2, "low": 1.05, "high": 1.4}}


def module(**changes) -> dict:
    """A module of three candidates as the JSON report holds it: jit chosen, ort inconclusive, slow slower,
    and one that failed to build."""
    timing = {"median_ms": 2.0, "p90_ms": 2.5, "cv": 0.1, "runs": 10}
    data = {
        "module": "enc", "strategy": "MaxThroughputStrategy", "device": "cpu", "call_mix": {"2": 3, "8": 1},
        "baseline": {"2": dict(timing, batch_size=2), "8": dict(timing, batch_size=8)},
        "chosen": "jit", "decision": "chose TorchInductorJitBackend: 1.4x [1.2, 1.6] over the recorded mix",
        "speedups": {"jit": 1.4, "ort": 1.02, "slow": 0.5},
        "verdicts": {"jit": {"passed": True, "verdict": "faster", "interval": {"median": 1.4, "low": 1.2, "high": 1.6},
                             "intervals": INTERVALS, "confidence": 0.95},
                     "ort": {"passed": False, "verdict": "inconclusive, eager kept",
                             "interval": {"median": 1.02, "low": 0.7, "high": 1.5}},
                     "slow": {"passed": False, "verdict": "slower at a batch size",
                              "interval": {"median": 0.5, "low": 0.4, "high": 0.6}}},
        "results": [{"key": k, "backend": b, "spec": {"type": f"x:{b}", "config": {}}, "status": st,
                     "error": "it raised" if st != "ok" else "",
                     "timings": {"2": dict(timing, batch_size=2), "8": dict(timing, batch_size=8)}}
                    for k, b, st in (("jit", "TorchInductorJitBackend", "ok"), ("ort", "ONNXRuntimeBackend", "ok"),
                                     ("slow", "TorchAOBackend", "ok"), ("bad", "TensorRTBackend", "error"))]}
    data.update(changes)
    return data


def test_the_answer_says_what_to_deploy_and_how_much_faster_per_batch_size():
    line = answer(module_report(module()))
    assert line == ("enc: deploy TorchInductorJitBackend: 1.4x [1.2, 1.6] as fast as eager over the recorded calls "
                    "(bs 2 1.5x [1.3, 1.7], bs 8 1.2x [1.05, 1.4]; 95% intervals).")
    kept = answer(module_report(module(chosen=None)))
    assert kept.startswith("enc: keep eager (no candidate was shown faster; the best, TorchInductorJitBackend, read "
                           "1.4x [1.2, 1.6]")
    text = summary({"modules": [module()], "failures": {"head": "no samples were recorded"}})
    assert text.splitlines()[0] == f"- **{line}**"          # the first line of what the CLI prints
    assert "- **head: keep eager (it could not be tuned: no samples were recorded)**" in text


def test_verdicts_are_the_decisions_in_the_table_and_the_picture():
    from aitune_ray.report.candidates import summary_table
    from aitune_ray.report.plots import speedup_points

    report = module_report(module())
    head, rows = summary_table(report)
    assert [r[:2] for r in rows] == [["TorchEager (baseline)", "baseline"], ["TorchInductorJitBackend", "chosen"],
                                     ["ONNXRuntimeBackend", "inconclusive, eager kept"],
                                     ["TorchAOBackend", "slower at a batch size"], ["TensorRTBackend", "error"]]
    points = {p["label"]: p for p in speedup_points(report)}
    assert {name: p["kind"] for name, p in points.items()} == {
        "TorchInductorJitBackend": CHOSEN, "ONNXRuntimeBackend": UNDECIDED, "TorchAOBackend": LOST}
    # the picture draws the table's figures: the median and its interval, on the same scale
    assert points["TorchInductorJitBackend"]["at"] == {"bs 2": (1.5, 1.3, 1.7), "bs 8": (1.2, 1.05, 1.4),
                                                       "all": (1.4, 1.2, 1.6)}


def test_an_unfit_host_is_said_at_the_top_with_what_to_do():
    steady = {"run": {"report": {"modules": [module()]}}}
    assert not any(b[0] == "warning" for b in blocks(steady["run"]))
    moved = module(verdict={"kind": "host unfit", "reason": "host unfit: eager called through the candidates' path "
                                                      "(the A/A control) read 0.62x [0.55, 0.70] against eager's own call"})
    run = {"device": "cpu", "report": {"modules": [moved]},
           "host_state": {"torch_threads": 8, "cpus_allowed": 2, "cpus": 2, "load_average": 11.5}}
    found = blocks(run)
    (warning,) = [b for b in found if b[0] == "warning"]
    assert [b[0] for b in found[:3]] == ["heading", "answer", "warning"]
    said = " ".join(warning[2])
    assert "the A/A control) read 0.62x [0.55, 0.70]" in said and "torch.set_num_threads" in said
    assert "this run had 8 torch thread(s), 2 of 2 CPUs allowed, a load average of 11.5" in said
    assert "unfit" in found[1][1][0]                                # the answer itself carries the caveat


def test_a_host_unfit_field_or_verdict_the_decision_adds_is_rendered():
    flagged = module(host_unfit=True, host_unfit_reason="the A/A control read 1.31x [1.12, 1.52]")
    (warning,) = [b for b in blocks({"report": {"modules": [flagged]}}) if b[0] == "warning"]
    assert warning[2][0] == "enc: the A/A control read 1.31x [1.12, 1.52]."
    typed = module(verdict={"kind": "host unfit", "reason": "host unfit: eager against itself read 6.49x"})
    (warning,) = [b for b in blocks({"report": {"modules": [typed]}}) if b[0] == "warning"]
    assert "eager against itself read 6.49x" in warning[2][0]


def test_no_paragraph_or_item_is_longer_than_400_characters(tmp_path):
    long = "; ".join(f"clause {i} of a decision that explains itself at length, with figures 1.23x [1.1, 1.4]"
                     for i in range(20))
    written = write_reports({"report": {"modules": [module(decision=long)]}}, tmp_path / "r.md")
    text = written["md"].read_text()
    page = written["html"].read_text()
    paragraphs = [p for p in re.split(r"\n\s*\n|\n(?=- )", text) if not p.lstrip().startswith("|")]
    assert max(len(p) for p in paragraphs) <= 400
    items = re.findall(r"<(?:p|li)>(.*?)</(?:p|li)>", page, re.S)
    assert items and max(len(i) for i in items) <= 400
    assert all(len(p) <= 300 for p in pieces(long)) and " ".join(pieces(long)).count("clause") == 20


def test_logs_are_kept_beside_the_report_and_only_existing_ones_linked(tmp_path):
    log = tmp_path / "tmp-actor" / "actor0.1.log"
    log.parent.mkdir()
    log.write_text("built\n")
    data = module()
    data["results"][0]["log_path"] = str(log)
    data["results"][1]["log_path"] = str(tmp_path / "gone" / "actor1.1.log")    # removed before the report
    written = write_reports({"report": {"modules": [data]}}, tmp_path / "out" / "job.md")
    assert (tmp_path / "out" / "job-logs" / "actor0.1.log").read_text() == "built\n"
    text, page = written["md"].read_text(), written["html"].read_text()
    assert "[job-logs/actor0.1.log](job-logs/actor0.1.log)" in text and "actor1.1.log" not in text
    assert "<a href=\"job-logs/actor0.1.log\">" in page and "actor1.1.log" not in page
    stored = json.loads(written["json"].read_text())["report"]["modules"][0]["results"]
    assert [r["log_path"] for r in stored[:2]] == ["job-logs/actor0.1.log", ""]
    import shutil

    shutil.rmtree(log.parent)                                   # the executor's own folder is gone later
    again = render_run_file(written["json"], tmp_path / "elsewhere")   # the link still resolves there
    assert (tmp_path / "elsewhere" / "job-logs" / "actor0.1.log").exists()
    assert "(job-logs/actor0.1.log)" in again["md"].read_text()


# ----- numbers without contradictions -----------------------------------------------------------------------
SCREENED = {"median": 0.5, "low": 0.4, "high": 0.6, "rounds": 8}
PRUNED = "slower than eager at its screening (0.500x [0.400, 0.600] over 8 paired rounds)"


def pruned_module(**changes) -> dict:
    """slow never reached the confirm session: screening showed it slower than eager. Its first timing (0.02 ms)
    against eager's baseline (2 ms, another moment) would read 100x."""
    data = module(**changes)
    data["verdicts"].pop("slow", None), data["speedups"].pop("slow", None)
    data["results"][2]["timings"] = {bs: dict(t, median_ms=0.02) for bs, t in data["results"][2]["timings"].items()}
    data["verdict"] = {"confidence": 0.95, "kind": "faster", **data.get("verdict", {}), "pruned": {"slow": PRUNED},
                       "screened": {"slow": SCREENED}}
    return data


def test_every_interval_is_labelled_with_its_own_confidence():
    from aitune_ray.report.candidates import summary_table

    report = module_report(pruned_module(verdict={"confidence": 1 - 0.05 / 3}))
    assert answer(report).endswith("(bs 2 1.5x [1.3, 1.7], bs 8 1.2x [1.05, 1.4]; 98.3% intervals).")
    head, rows = summary_table(report)
    assert head[2] == "speedup [98.3% interval]"
    assert rows[3][2] == "0.5x [0.4, 0.6] at screening (90%)"     # the screening interval is labelled as one
    assert "95%" not in " ".join(head + [c for r in rows for c in r])


def test_a_figure_over_the_mix_outside_the_per_size_figures_says_why():
    from aitune_ray.report.answer import WEIGHTING
    from aitune_ray.report.candidates import details

    inside = answer(module_report(module()))
    assert WEIGHTING not in inside                                     # 1.4x between 1.2x and 1.5x
    data = module()
    data["verdicts"]["jit"]["interval"] = {"median": 1.6, "low": 1.45, "high": 1.7}
    data["speedups"]["jit"] = 1.6
    report = module_report(data)
    assert f"over the recorded calls ({WEIGHTING}) (bs 2" in answer(report)
    facts = dict(details(report)[0][1])
    assert facts["why the figure over the recorded calls lies outside the per-size ones"] == WEIGHTING


def test_an_inconclusive_verdict_names_the_batch_size_that_fell_short():
    from aitune_ray.decision.verdict import Judgement, Verdict
    from aitune_ray.report.candidates import summary_table
    from aitune_ray.report.verdict import judgement_text

    data = module()
    data["verdicts"]["ort"] = {"passed": False, "verdict": "inconclusive",
                               "interval": {"median": 1.1, "low": 1.0, "high": 1.2},
                               "intervals": {"2": {"median": 1.15, "low": 1.05, "high": 1.3},
                                             "8": {"median": 1.02, "low": 0.99, "high": 1.1}}}
    _, rows = summary_table(module_report(data))
    assert rows[2][1] == "inconclusive at bs 8"                        # 8 is not shown faster; 2 is
    data["verdicts"]["ort"]["intervals"]["2"]["low"] = 0.9             # now 2 is not shown non-inferior
    _, rows = summary_table(module_report(data))
    assert rows[2][1] == "inconclusive at bs 2"
    judged = Judgement("ort", False, "inconclusive", {"median": 1.1, "low": 1.0, "high": 1.2, "rounds": 60},
                       {2: {"median": 1.15, "low": 1.05, "high": 1.3}, 8: {"median": 1.02, "low": 0.99, "high": 1.1}})
    text = judgement_text(judged, Verdict("ort", "inconclusive", confidence=0.95, finalists=1))
    assert "includes 1.010x (not shown faster at bs 8 (1.020x [0.990, 1.100]))" in text


def test_a_candidate_pruned_at_screening_shows_its_screening_figure_and_why_never_a_stray_figure():
    from aitune_ray.report.candidates import details, summary_table
    from aitune_ray.report.plots import speedup_points

    report = module_report(pruned_module())
    _, rows = summary_table(report)
    assert rows[3] == ["TorchAOBackend", PRUNED, "0.5x [0.4, 0.6] at screening (90%)", "-", "-"]
    facts = dict(details(report)[2][1])
    assert facts["speedup over the recorded calls"] == "0.5x [0.4, 0.6] at screening (90%)"
    assert facts["bs 2"].startswith("speedup -;") and facts["bs 8"].startswith("speedup -;")   # not 100x
    assert "TorchAOBackend" not in {p["label"] for p in speedup_points(report)}   # not drawn as measured


def test_keep_eager_says_no_candidate_was_shown_faster_when_screening_pruned_them_all():
    data = pruned_module(chosen=None, verdicts={}, speedups={})
    data["verdict"].update(kind="not faster", pruned={"jit": PRUNED.replace("0.500x", "0.700x"), "ort": PRUNED,
                                                      "slow": PRUNED},
                           screened={"jit": dict(SCREENED, median=0.7), "ort": SCREENED, "slow": SCREENED})
    line = answer(module_report(data))
    assert line.startswith("enc: keep eager (no candidate was shown faster; the best at its screening, "
                           "TorchInductorJitBackend, read 0.7x [0.4, 0.6] at screening (90%): slower than eager")
    assert "measured" not in line
    failed = module(chosen=None, verdicts={}, speedups={})
    for result in failed["results"]:
        result["status"] = "error"
    assert answer(module_report(failed)) == "enc: keep eager (no candidate built and ran correctly)."


def test_the_answer_says_in_which_context_its_figures_hold():
    report = module_report(module())
    report.measured_in = "cpu with 2 torch threads"
    assert answer(report).endswith("(bs 2 1.5x [1.3, 1.7], bs 8 1.2x [1.05, 1.4]; 95% intervals; measured on cpu "
                                   "with 2 torch threads).")
