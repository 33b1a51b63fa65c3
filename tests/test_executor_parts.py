"""RayExecutor is made of parts, each given what it needs, not of mixins that read the executor's attributes.
No Ray is started here."""

import ast
import inspect
from abc import ABC
from pathlib import Path

import pytest

pytest.importorskip("ray")

from aitune_ray.cluster import boxes, driver_gpu, handle, restores, session, timing_calls  # noqa: E402
from aitune_ray.cluster.boxes import Boxes  # noqa: E402
from aitune_ray.cluster.driver_gpu import DriverGpu  # noqa: E402
from aitune_ray.cluster.ray_executor import RayExecutor  # noqa: E402
from aitune_ray.cluster.restores import Restores  # noqa: E402
from aitune_ray.cluster.session import RaySession, SessionOptions  # noqa: E402
from aitune_ray.cluster.timing_calls import TimingCalls  # noqa: E402
from aitune_ray.worker.seam import Executor  # noqa: E402

PARTS = [(session, RaySession), (driver_gpu, DriverGpu), (boxes, Boxes), (restores, Restores),
         (timing_calls, TimingCalls)]


def test_the_executor_has_no_base_but_executor():
    assert RayExecutor.__mro__ == (RayExecutor, Executor, ABC, object)


def _reads_and_sets(cls) -> tuple[set[str], set[str]]:
    """The self.<name> a class's methods read, and those its methods set or it defines."""
    tree = ast.parse(inspect.getsource(cls))
    reads, sets = set(), set(vars(cls))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            (sets if isinstance(node.ctx, ast.Store) else reads).add(node.attr)
    return reads, sets


@pytest.mark.parametrize("module, cls", PARTS, ids=[cls.__name__ for _, cls in PARTS])
def test_each_part_reads_only_what_it_sets_or_defines(module, cls):
    """A mixin reads attributes its host sets; a part reads only its own (what its constructor was given)."""
    reads, sets = _reads_and_sets(cls)
    assert reads <= sets, f"{cls.__name__} reads {sorted(reads - sets)}, which it neither sets nor defines"
    assert [c for c in vars(module).values() if inspect.isclass(c) and c.__module__ == module.__name__ and
            c is not cls and c.__name__ != "SessionOptions"] == []


def test_each_part_is_made_from_its_arguments_alone(tmp_path):
    options = SessionOptions(gpus_per_actor=0.5, cpus_per_actor=2, max_actors=3, log_dir=str(tmp_path))
    ray_session = RaySession(options)
    assert ray_session.pool_shape(2.0, 16.0, quiet=True) == (3, 0.5) and ray_session.actors_share_gpus()
    assert not ray_session.made and ray_session.actors() == 0
    gpu = DriverGpu(ray_session)
    waited = []
    refs = Boxes(lambda: waited.append(True))
    held = Restores()
    events = []
    calls = TimingCalls(ray_session, gpu, refs, held, lambda *args, **kwargs: events.append(args),
                        task_timeout_s=5.0, remeasure_rounds=2)
    assert (gpu.session, calls.session, calls.driver_gpu, calls.boxes, calls.restores) == \
        (ray_session, ray_session, gpu, refs, held)
    assert (calls.task_timeout_s, calls.remeasure_rounds, refs.puts, waited, events) == (5.0, 2, 0, [], [])


def test_the_executor_hands_its_arguments_to_its_parts(tmp_path):
    executor = RayExecutor("127.0.0.1:1", gpus_per_actor=0.5, cpus_per_actor=2, max_actors=3, task_timeout_s=7.0,
                           remeasure_rounds=4, log_dir=str(tmp_path), warm_up="off", gpu_kind="H100")
    assert executor.session.options is executor.options and executor.driver_gpu.session is executor.session
    assert (executor.address, executor.gpus_per_actor, executor.cpus_per_actor, executor.max_actors,
            executor.log_dir, executor.warm_up, executor.gpu_kind) == ("127.0.0.1:1", 0.5, 2, 3, str(tmp_path),
                                                                     "off", "H100")
    assert (executor.task_timeout_s, executor.remeasure_rounds) == (7.0, 4)
    assert executor.timing.emit == executor.emit and executor.timing.boxes is executor.boxes
    assert executor.pool is None and executor.layout is None and executor.puts == 0 and executor.open_s is None


def _host_members() -> set[str]:
    return {name for name in vars(handle.Host) if not name.startswith("_")} | set(handle.Host.__annotations__)


def test_the_run_handle_uses_of_its_executor_only_what_host_names():
    source = Path(handle.__file__).read_text()
    used = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and \
                isinstance(node.value.value, ast.Name) and node.value.value.id == "self" and node.value.attr == "_ex":
            used.add(node.attr)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "executor":
            used.add(node.attr)
    assert used and used <= _host_members(), sorted(used - _host_members())


def test_the_executor_has_everything_host_names():
    missing = [name for name in _host_members() if not hasattr(RayExecutor, name)]
    assert missing == []
