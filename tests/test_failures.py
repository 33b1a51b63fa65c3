"""failures.outcome: how a task ended, as a result's status and one-line message, in one place (CPU, no Ray;
Ray's exceptions are recognized by class name and module, so stand-ins of those names are Ray's here)."""

from __future__ import annotations

import torch

from aitune_ray.backend import Backend, BackendConfig
from aitune_ray.worker.candidate import run_candidate
from aitune_ray.worker.seam import failed_plan
from aitune_ray.records.failures import classify, outcome
from aitune_ray.records.results import CRASHED, ERROR, OK, OOM, TIMED_OUT, CandidateJob
from aitune_ray.executors.run_dir import NOT_RUN
from aitune_ray.model.samples import Sample, SampleStore


RayError = type("RayError", (Exception,), {"__module__": "ray.exceptions"})


def ray_error(name: str, message: str = "", cause: BaseException | None = None) -> BaseException:
    """An exception whose class looks like Ray's (a RayError of Ray's module, as all of Ray's are)."""
    cls = type(name, (RayError,), {"__module__": "ray.exceptions"})
    exc = cls(message)
    if cause is not None:
        exc.cause = cause
    return exc


def test_a_task_that_ended_well_has_no_failure():
    assert outcome("build") is None


def test_an_exception_raised_here_is_an_error_or_out_of_memory_with_its_stage():
    error = outcome("build", exc=ValueError("bad   shape\n(2, 3)"))
    assert (error.status, error.error_type, error.worker_lost) == (ERROR, "ValueError", False)
    assert error.error == "build failed: ValueError: bad shape (2, 3)"
    oom = outcome("profiling", exc=torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert oom.status == OOM and oom.error.startswith("profiling failed: OutOfMemoryError: CUDA out of memory")


def test_a_timeout_says_the_limit_and_whether_the_worker_was_replaced():
    here = outcome("generation", timed_out=True, limit_s=2.5)
    assert (here.status, here.worker_lost, here.error) == (TIMED_OUT, False, "generation gave no result within 2.5 s")
    there = outcome("build of B", timed_out=True, limit_s=60, replaced=True)
    assert there.worker_lost and there.error == ("build of B gave no result within 60 s; its worker was killed "
                                                 "and replaced")
    assert there.error_type == "TimeoutError"
    named = outcome("the build of B", timed_out=True, limit_s=6, limit_name="task_timeout_s", replaced=True)
    assert named.error == "the build of B gave no result within task_timeout_s=6 s; its worker was killed and replaced"


def test_a_task_that_never_ran_says_why_and_is_not_journaled():
    unrun = outcome("the build of B", unrun="the executor was closed")
    assert (unrun.status, unrun.worker_lost, unrun.error_type) == (ERROR, False, "NotRun")
    assert unrun.error == "the build of B did not run: the executor was closed"
    assert unrun.error_type in NOT_RUN   # a resume runs it, instead of replaying it as failed


def test_a_lost_worker_quotes_the_fatal_line_of_its_log(tmp_path):
    log = tmp_path / "worker.err"
    log.write_text("starting\nFatal Python error: Segmentation fault\nThread 0x1\n")
    died = outcome("build of B", failure=classify(ray_error("ActorDiedError", "the actor died")), log_path=str(log))
    assert (died.status, died.worker_lost) == (CRASHED, True)
    assert died.error == "the worker process died during build of B: Fatal Python error: Segmentation fault " \
                         "(the actor died)"
    oom = outcome("build of B", failure=classify(ray_error("OutOfMemoryError", "the memory monitor killed it")))
    assert oom.status == OOM and oom.error.startswith("the worker process ran out of memory during build of B (")


def test_a_workers_own_exception_is_unwrapped_from_rays_task_error():
    wrapped = ray_error("RayTaskError", "in the actor", cause=KeyError("weights"))
    failure = outcome("loading the module", failure=classify(wrapped))
    assert (failure.status, failure.error_type) == (ERROR, "KeyError")
    assert failure.error == "loading the module failed: KeyError: 'weights'"


class Broken(Backend):
    """A backend whose build raises, as a compiler that is missing would."""

    config_class = BackendConfig

    def _build(self, module, samples, device, workdir):
        raise RuntimeError("no compiler here")

    def _infer(self, *args, **kwargs):
        raise AssertionError("never built")


def test_a_candidate_whose_build_raises_gets_its_status_and_message_from_outcome(tmp_path):
    backend = Broken(BackendConfig())
    x = torch.ones(2, 4)
    samples = SampleStore(samples=[Sample(args=(x,), kwargs={}, outputs=x, batch_size=2)])
    job = CandidateJob(key=backend.key(), spec=backend.spec())
    result, built = run_candidate(job, torch.nn.Identity(), samples, torch.device("cpu"), tmp_path)
    assert built is None and result.status != OK
    expected = outcome("build", exc=RuntimeError("no compiler here"))
    assert (result.status, result.error_type, result.error) == (expected.status, expected.error_type, expected.error)


def test_a_plan_that_failed_gives_each_of_its_jobs_the_outcome_of_its_exception():
    jobs = [CandidateJob(key=f"K{i}", spec={"type": "pkg.mod:Planned", "config": {}}) for i in (1, 2)]
    exc = torch.OutOfMemoryError("CUDA out of memory while profiling")
    results = failed_plan(jobs, exc, 1.5, "cpu")
    expected = outcome("plan", exc=exc)
    assert [(r.key, r.status, r.error_type, r.error) for r in results] == \
        [(j.key, OOM, expected.error_type, expected.error) for j in jobs]
