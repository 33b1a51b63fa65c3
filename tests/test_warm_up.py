"""The warm-up on a thread of its own: the first task stops it after its step under way (aitune_ray.runtime.warm_up).
Every wait is on an event."""

import threading

import pytest
import torch

from aitune_ray.runtime.warm_up import WarmUp, steps_for
from tests.helpers import thread_settings


@pytest.fixture
def threads():
    with thread_settings() as inductor_config:
        yield inductor_config


def test_stop_ends_the_warm_up_after_its_step_under_way_and_skips_the_rest(threads):
    entered, ran = threading.Event(), []
    warm = None

    def first():
        ran.append(threads.compile_threads)   # the compile workers, started on this thread, see the count
        entered.set()
        assert warm.stopping.wait(30)   # the step under way when the task came: it ends, it is not cut
        ran.append("first")

    warm = WarmUp(3, "compile", steps=[("first_s", first), ("second_s", lambda: ran.append("second")),
                                       ("third_s", lambda: ran.append("third"))])
    warm.start()
    assert entered.wait(30)
    seconds = warm.stop()
    assert ran == [3, "first"]
    assert seconds["skipped"] == ["second_s", "third_s"]
    assert "first_s" in seconds and "second_s" not in seconds
    assert warm.ended_at is not None and warm.ended_at >= warm.began_at


def test_a_warm_up_stopped_at_once_still_sets_the_thread_counts(threads):
    warm = None

    def first():   # the stop may come before or during this step: either way nothing after it runs
        assert warm.stopping.wait(30)

    warm = WarmUp(3, "compile", steps=[("first_s", first), ("second_s", lambda: pytest.fail("ran after stop"))])
    warm.start()
    seconds = warm.stop()
    assert threads.compile_threads == 3 and torch.get_num_threads() == 3
    assert seconds["compile_threads"] == 3 and seconds["torch_threads"] == 3
    assert "second_s" in seconds["skipped"]


def test_a_failing_step_ends_the_warm_up_without_raising(threads, caplog):
    def broken():
        raise RuntimeError("no compiler here")

    seconds = WarmUp(2, "compile", steps=[("broken_s", broken),
                                          ("after_s", lambda: pytest.fail("ran after a failure"))]).run()
    assert "warm-up step broken_s failed: no compiler here" in caplog.text
    assert "broken_s" not in seconds and "after_s" not in seconds and "warm_up_s" in seconds


def test_run_does_every_step_and_the_modes_name_their_steps(threads):
    ran = []
    seconds = WarmUp(2, "imports", steps=[(f"{n}_s", lambda n=n: ran.append(n)) for n in "abc"]).run()
    assert ran == ["a", "b", "c"] and "skipped" not in seconds and seconds["mode"] == "imports"
    assert steps_for("off") == []
    assert [n for n, _ in steps_for("imports")] == ["compile_pool_start_s", "cuda_context_s", "compiler_import_s",
                                                    "torchao_import_s"]
    assert "first_compile_s" in [n for n, _ in steps_for("compile")]
    with pytest.raises(ValueError, match="warm-up mode must be one of compile, imports, off"):
        steps_for("everything")


def test_a_failed_inductor_import_ends_the_warm_up_and_the_task_still_runs(threads, monkeypatch, caplog):
    import aitune_ray.runtime.warm_up as warm_up

    def broken(self):
        raise ImportError("no torch._inductor here")

    monkeypatch.setattr(warm_up.WarmUp, "_set_compile_threads", broken)
    warm = WarmUp(2, "compile", steps=[("never_s", lambda: pytest.fail("ran after a failed import"))])
    warm.start()
    seconds = warm.stop()   # the task's call: it must not raise the import's error again
    assert "warm-up: Inductor's import failed: no torch._inductor here" in caplog.text
    assert warm.ended_at is not None and "never_s" not in seconds
