"""Fuzzing of job files and checkpoints, seeded (the same cases every run). `python -m tests.fuzz` prints the
counts; tests/test_fuzz.py asserts them.

Job files: mutations of the example jobs (wrong types, unknown keys, missing keys, huge numbers, bad import
paths, YAML errors), each made invalid on purpose. Each must be refused by load_job with a one-line
ConfigError naming the mutated key (for YAML errors: the line), never another exception, never accepted.

Run records: a real job's JSON report with a field of another type, a huge number, a key removed, a value
nested deeply, the text cut short or made invalid UTF-8. Each must render, or be refused with a one-line
ConfigError that leaves no report file; never another exception.

Checkpoints: a two-module checkpoint (ONNX Runtime and a JIT backend) cut at 20 offsets, with 200 single
bit flips, every hostile case of tests/hostile.py, AOTInductor packages without a binary (package_shapes),
configs of known backends that name a program, a library, a file or a folder (config_shapes), and weights
of other dtypes. Each load is refused with a one-line CheckpointError
or gives exactly the saved model back (a flip in zip bookkeeping that holds no data: a timestamp, a
version field). Counted: crashes (any other exception), hangs (over HANG_S), imports (the bait module or
any new entry in sys.modules) and silent loads (a load that gives anything else).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import random
import signal
import sys
import types
import typing
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import torch

import aitune_ray as ait
from aitune_ray.errors import CheckpointError, ConfigError
from aitune_ray.records.validate import _matches

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_JOBS = ("examples/mlp/job.yaml", "examples/pipeline/job.yaml", "examples/bert/job_tiny.yaml")
JOB_SEED, CHECKPOINT_SEED = 20261201, 14
HANG_S = 20

WRONG = (None, True, 7, 2.5, "zz-text", [1, 2], {"zz": 1})
HUGE = (10 ** 30, -(10 ** 30), 2 ** 64, 1e300, float("inf"), float("-inf"), float("nan"))
BAD_FACTORIES = ("zz_no_such_package.module:make", "examples.mlp.model", "examples.mlp.model:no_such_factory",
                 ":make_model", "examples.mlp.model:", "os.path:sep")
BAD_BACKENDS = ("zz_no_such_package.module:Backend", "NoSuchBackend", "os.path:join", "")
UNKNOWN = "zz_unknown_key"


# ----- job files ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class JobCase:
    kind: str
    key: str          # what the error must name
    text: str         # the job file


def _key(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _fields(cls: type, data: dict, path: tuple) -> Iterator[tuple[tuple, Any, Any]]:
    """(path, value, type hint) of every key of data that the schema declares, recursively; config mappings
    are followed into their BackendConfig or MeasureConfig class."""
    from aitune_ray.command.job import BackendSpec, StrategySpec, backend_class
    from aitune_ray.measure.timing import MeasureConfig

    hints = typing.get_type_hints(cls)
    for name, value in data.items():
        if name not in hints:
            continue
        here, hint = (*path, name), hints[name]
        yield here, value, hint
        inner = _dataclass_in(hint)
        if cls is StrategySpec and name == "measure":
            inner = MeasureConfig
        if cls is BackendSpec and name == "config":
            inner = backend_class(data["type"], "type").config_class
        if inner is not None and isinstance(value, dict):
            yield from _fields(inner, value, here)
        if isinstance(value, list):
            (element_hint,) = typing.get_args(_unoptional(hint)) or (Any,)
            item = _dataclass_in(element_hint)
            for index, element in enumerate(value):
                if item is not None and isinstance(element, dict):
                    yield from _fields(item, element, (*here, index))
                else:
                    yield (*here, index), element, element_hint


def _unoptional(hint):
    """X for X | None, else hint."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1 else hint


def _dataclass_in(hint) -> type | None:
    for option in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(option):
            return option
    return None


def _is_number_hint(hint) -> bool:
    options = typing.get_args(hint) or (hint,)
    return any(o in (int, float) for o in options)


def _set(data: Any, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def _dump(data: dict) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)


def job_cases(count: int = 520, seed: int = JOB_SEED) -> list[JobCase]:
    """count invalid jobs made from the example jobs, the same ones for one seed."""
    import yaml

    from aitune_ray.command.job import Job

    rng = random.Random(seed)
    bases = [(REPO / name).read_text() for name in EXAMPLE_JOBS]
    kinds = ("wrong_type", "unknown_key", "missing_key", "huge_number", "bad_import", "yaml_error")
    cases: list[JobCase] = []
    while len(cases) < count:
        text = rng.choice(bases)
        data = yaml.safe_load(text)
        kind = kinds[len(cases) % len(kinds)]
        case = _mutate(kind, data, text, rng, list(_fields(Job, data, ())))
        if case is not None:
            cases.append(case)
    return cases


def _mutate(kind: str, data: dict, text: str, rng: random.Random, fields: list) -> JobCase | None:
    data = copy.deepcopy(data)
    if kind == "wrong_type":
        path, _, hint = rng.choice(fields)
        wrong = [w for w in WRONG if not _matches(w, hint)]
        if not wrong:
            return None
        _set(data, path, copy.deepcopy(rng.choice(wrong)))
        return JobCase(kind, _key(path), _dump(data))
    if kind == "unknown_key":
        places = [()] + [p for p, v, h in fields if isinstance(v, dict) and p[-1] not in ("tolerance",)]
        place = rng.choice(places)
        node = data
        for part in place:
            node = node[part]
        node[UNKNOWN] = rng.choice(WRONG[1:])
        return JobCase(kind, _key((*place, UNKNOWN)), _dump(data))
    if kind == "missing_key":
        required = [("model",), ("data",)] + [p for p, v, h in fields if p[-1] == "type" and p[0] == "backends"]
        path = rng.choice(required)
        node = data
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]
        return JobCase(kind, _key(path), _dump(data))
    if kind == "huge_number":
        numbers = [(p, h) for p, v, h in fields if _is_number_hint(h) and not isinstance(v, (dict, list))]
        if not numbers:
            return None
        path, _ = rng.choice(numbers)
        _set(data, path, rng.choice(HUGE))
        return JobCase(kind, _key(path), _dump(data))
    if kind == "bad_import":
        backends = [p for p, v, h in fields if p[-1] == "type" and p[0] == "backends"]
        path = rng.choice([("model",), ("data",), *backends])
        _set(data, path, rng.choice(BAD_BACKENDS if path[0] == "backends" else BAD_FACTORIES))
        return JobCase(kind, _key(path), _dump(data))
    return _yaml_error(text, rng)


def _yaml_error(text: str, rng: random.Random) -> JobCase | None:
    """A syntax error or a key given twice; None when the change happens to leave valid YAML."""
    import yaml

    lines = text.splitlines()
    at = rng.randrange(len(lines))
    how = rng.randrange(6)
    if how == 0:
        lines.insert(at, "\tstrategy: {type: FirstWins}")                  # a tab where indentation goes
    elif how == 1:
        lines[at] = lines[at] + " [unclosed"  if ":" in lines[at] else lines[at] + ": [unclosed"
    elif how == 2:
        lines.insert(at, "model_args: {blocks: 4, width: 64")              # a flow mapping never closed
    elif how == 3:
        lines.insert(at, '  "unbalanced: quote')
    elif how == 4:
        key = rng.choice(["device", "model", "output", "strategy"])
        lines += [f"{key}: cpu", f"{key}: cpu"]                             # a key given twice
        mutated = "\n".join(lines)
        return JobCase("yaml_error", key, mutated)
    else:
        lines.insert(at, "- a list item: where a mapping goes")
    mutated = "\n".join(lines)
    try:
        yaml.safe_load(mutated)
    except yaml.YAMLError:
        return JobCase("yaml_error", "not valid YAML", mutated)
    return None


def run_job_case(case: JobCase, folder: Path) -> str:
    """'clear' (a one-line ConfigError naming the key), 'unclear' (a ConfigError that does not), 'accepted'
    or 'crash: ...' (any other exception)."""
    from aitune_ray.command.job import load_job

    path = folder / "job.yaml"
    path.write_text(case.text)
    try:
        load_job(path)
    except ConfigError as exc:
        message = str(exc)
        named = case.key in message if case.kind == "yaml_error" else message.startswith(case.key)
        return "clear" if "\n" not in message and named else f"unclear: {message}"
    except Exception as exc:  # noqa: BLE001 - counted
        return f"crash: {type(exc).__name__}: {exc}"
    return "accepted"


def fuzz_jobs(folder: Path, count: int = 520) -> tuple[Counter, list[str]]:
    """Counts by outcome (and by kind), with the first failures described."""
    counts, failures = Counter(), []
    for case in job_cases(count):
        outcome = run_job_case(case, folder)
        counts[outcome.partition(":")[0]] += 1
        counts[f"kind {case.kind}"] += 1
        if outcome != "clear" and len(failures) < 10:
            failures.append(f"{case.kind} {case.key}: {outcome}\n{case.text}")
    counts["mutations"] = sum(v for k, v in counts.items() if k.startswith("kind "))
    return counts, failures


# ----- checkpoints -----------------------------------------------------------------------------------------------

class Pipe:
    """Two wrapped modules: 'a' on ONNX Runtime (an artifact), 'b' on a JIT backend (a recipe)."""

    def __init__(self, seed: int = 0):
        from tests.hostile import mlp

        self.a = ait.Module(mlp(seed), "a")
        self.b = ait.Module(mlp(seed + 1), "b")


def saved_pipe(folder: Path) -> tuple[Path, dict]:
    from aitune_ray.backend import TorchEagerBackend
    from tests.hostile import X, onnx_backend, tuned, mlp

    pipe = Pipe()
    pipe.a, pipe.b = tuned(mlp(0), onnx_backend(), "a"), tuned(mlp(1), TorchEagerBackend(), "b")
    path = ait.save(pipe, folder / "pipe.ait")
    return path, {"a": pipe.a(X), "b": pipe.b(X)}


class Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise Hang()


def load_outcome(path: Path, expected: dict, bait) -> str:
    """'refused', 'identical', 'silent', 'hang', 'import' or 'crash: ...' for one load of path."""
    from tests.hostile import X

    fresh, before = Pipe(seed=7), set(sys.modules)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_S)
    try:
        ait.load(fresh, path)
        outcome = "identical" if all(torch.equal(getattr(fresh, n)(X), out) for n, out in expected.items()) \
            else "silent"
    except CheckpointError as exc:
        outcome = "refused" if "\n" not in str(exc) else f"crash: a message of several lines: {exc}"
    except Hang:
        outcome = "hang"
    except Exception as exc:  # noqa: BLE001 - counted
        outcome = f"crash: {type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if bait.imported() or set(sys.modules) - before:
        return f"import: {sorted(set(sys.modules) - before)[:5]}"
    return outcome


def checkpoint_cases(path: Path, bait) -> Iterator[tuple[str, str, bytes | None, Any]]:
    """(kind, name, bytes of the file to load or None, build(path, bait) or None)."""
    from tests import hostile

    data = path.read_bytes()
    for index in range(1, 21):                                   # truncation at 20 offsets, ends included
        cut = round(len(data) * index / 21) if index < 20 else len(data) - 1
        yield "truncation", f"cut at {cut}", data[:cut], None
    rng = random.Random(CHECKPOINT_SEED)
    for _ in range(200):                                          # 200 single bit flips
        bit = rng.randrange(len(data) * 8)
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        yield "bit flip", f"bit {bit}", bytes(flipped), None
    for name, (build, _) in sorted(hostile.ARCHIVE_CASES.items()):
        yield "hostile archive", name, None, build
    for where, manifest in hostile.wrong_type_cases(hostile.manifest_of(path)):
        yield "wrong JSON type", where, None, (lambda m: lambda p, b: hostile.with_manifest(
            p, json.dumps(m).encode()))(manifest)
    yield "hostile class", "backend.type names other code", None, lambda p, b: hostile.edit_manifest(
        p, lambda m: m["modules"][0]["backend"].update(type=b.path()))
    yield "hostile class", "pytree spec names unknown types", None, lambda p, b: hostile.edit_manifest(
        p, lambda m: hostile.set_key(m["modules"][0]["state"], "output_spec", json.dumps(
            [1, {"type": f"{b.name}.Evil", "context": "null", "children_spec": []}])))
    yield "hostile class", "ONNX custom-op library", None, lambda p, b: hostile.replace_onnx(
        p, lambda model: hostile.add_custom_op(model, str(p.parent / "libcustomops.so")))
    yield "hostile class", "artifact of native code", None, lambda p, b: hostile.replace_artifact(
        p, Path(sys.executable).resolve().read_bytes()[:4096])
    yield "hostile class", "ONNX external data outside", None, lambda p, b: hostile.replace_onnx(
        p, lambda model: hostile.point_data_outside(model, "../../../etc/hostname"))
    for name, change in package_shapes(path.parent / "code-ran").items():
        yield "AOTInductor package", name, None, (lambda c: lambda p, b: as_package(p, c))(change)
    for name, spec in config_shapes(path.parent).items():
        yield "config naming code", name, None, (lambda s: lambda p, b: hostile.backend_spec(p, s, module=1))(spec)
    for dtype in (torch.float64, torch.complex64, torch.bool, torch.float8_e4m3fn, torch.int8):
        yield "weights of another dtype", str(dtype), None, (lambda d: lambda p, b: hostile.with_weights_of_dtype(
            p, d))(dtype)


def package_shapes(marker: Path) -> dict[str, Any]:
    """AOTInductor packages (.pt2) that hold no binary: an exported program's members, changed as an attacker
    would ({members} -> members, or the package's bytes). Each is code to the loader, whatever its layout."""
    from tests import hostile

    shapes = {"exported program, no binary": lambda m: m,
              "encrypted member": lambda m: hostile.flag_encrypted(hostile.zip_bytes(m)),
              "zip64 record naming 2 disks": lambda m: hostile.naming_two_disks(hostile.zip_bytes(m))}
    for name, attack in hostile.PACKAGE_ATTACKS.items():
        shapes[name] = (lambda a: lambda m: a(m, marker))(attack)
    return shapes


def as_package(path: Path, change) -> None:
    """Module 'a' turned into a TorchInductorAotBackend whose model.pt2 is change(an exported program's
    members), every hash fixed."""
    from aitune_ray.backend import TorchInductorAotBackend
    from aitune_ray.records.imports import class_path
    from tests import hostile

    members = change(hostile._exported_program_members("model"))
    data = members if isinstance(members, bytes) else hostile.zip_bytes(members)
    hostile.write_parts(path, [(i.filename, d) for i, d in hostile.parts_of(path)
                               if not i.filename.startswith("modules/0/artifacts/")]
                        + [("modules/0/artifacts/model.pt2", data)])

    def point(m):
        m["modules"][0].update(backend={"type": class_path(TorchInductorAotBackend), "config": {}}, is_jit=False,
                               state={}, artifacts={"model.pt2": {
                                   "member": "modules/0/artifacts/model.pt2", "size": len(data),
                                   "sha256": hashlib.sha256(data).hexdigest()}})
    hostile.edit_manifest(path, point)


def config_shapes(folder: Path) -> dict[str, dict]:
    """Backend specs of known classes whose configs name a program, a library, a file or a folder."""
    from aitune_ray import backend as b
    from aitune_ray.records.imports import class_path

    def spec(cls, **config):
        return {"type": class_path(cls), "config": config}

    out = str(folder / "written")
    ort = {"execution_provider": "TensorrtExecutionProvider"}
    return {
        "inductor cpp.cxx": spec(b.TorchInductorJitBackend, options={"cpp.cxx": [str(folder / "cxx.sh")]}),
        "inductor trace dir": spec(b.TorchInductorJitBackend, options={"trace.enabled": True, "trace.debug_dir": out}),
        "inductor debug_dir": spec(b.TorchInductorJitBackend, options={"debug_dir": out}),
        "inductor unknown option": spec(b.TorchInductorJitBackend, options={"zz_unknown": 1}),
        "torchao config object": spec(b.TorchAOBackend, quantization_config={"_type": "Int8WeightOnlyConfig"}),
        "ort trt plugin library": spec(b.ONNXRuntimeBackend, **ort, provider_options={
            "tensorrt": {"trt_extra_plugin_lib_paths": str(folder / "libplugin.so")}}),
        "ort trt subgraph dump": spec(b.ONNXRuntimeBackend, **ort, provider_options={
            "tensorrt": {"trt_dump_subgraphs": True}}),
        "ort trt calibration table": spec(b.ONNXRuntimeBackend, **ort, provider_options={
            "tensorrt": {"trt_int8_calibration_table_name": "../../table"}}),
        "ort trt engine cache prefix": spec(b.ONNXRuntimeBackend, **ort, provider_options={
            "tensorrt": {"trt_engine_cache_prefix": "../../engine"}}),
        "torch-tensorrt engine_cache_dir": spec(b.TorchTensorRTJitBackend, compile_config={
            "options": {"engine_cache_dir": out}}),
        "torch-tensorrt timing_cache_path": spec(b.TorchTensorRTJitBackend, compile_config={
            "timing_cache_path": out}),
        "tensorrt timing_cache": spec(b.TensorRTBackend, timing_cache=out),
        "kernel selector delegate": {**spec(b.KernelSelectorBackend), "delegate": spec(
            b.TorchInductorJitBackend, options={"cpp.cxx": [str(folder / "cxx.sh")]})},
        "batch dispatch member": spec(b.BatchDispatchBackend, routes={"1": "x"}, members={"x": spec(
            b.TorchInductorJitBackend, options={"trace.enabled": True, "trace.debug_dir": out})}),
    }


def fuzz_checkpoints(folder: Path) -> tuple[Counter, list[str]]:
    from tests.hostile import Bait

    path, expected = saved_pipe(folder)
    bait = Bait(folder)
    try:
        load_outcome(path, expected, bait)                         # the first load imports what loads need
        assert load_outcome(path, expected, bait) == "identical"
        counts, failures = Counter(), []
        target = folder / "case.ait"
        for kind, name, data, build in checkpoint_cases(path, bait):
            target.write_bytes(data if data is not None else path.read_bytes())
            if build is not None:
                build(target, bait)
            outcome = load_outcome(target, expected, bait)
            counts[f"{kind}: {outcome.partition(':')[0]}"] += 1
            counts[outcome.partition(":")[0]] += 1
            counts["cases"] += 1
            if outcome not in ("refused", "identical") or (kind != "bit flip" and outcome != "refused"):
                failures.append(f"{kind} {name}: {outcome}")
        return counts, failures
    finally:
        bait.remove()


def hostile_archive_names() -> list[str]:
    from tests import hostile

    return sorted(hostile.ARCHIVE_CASES)



# ----- run records (the JSON that `aitune-ray report` reads) ---------------------------------------------------

RUN_SEED = 20261206
RUN_KINDS = ("wrong_type", "huge_number", "missing_key", "cut_text", "not_utf8", "deep_nesting")


def json_fields(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(path, value) of every key and list item under node."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*path, key), value
        yield from json_fields(value, (*path, key))


def run_record_cases(run: dict, count: int = 240, seed: int = RUN_SEED) -> list[tuple[str, str, bytes]]:
    """(kind, where, the file's bytes): count mutations of a job's run record, the same ones for one seed."""
    rng = random.Random(seed)
    text = json.dumps(run).encode()
    fields = list(json_fields(run))
    cases: list[tuple[str, str, bytes]] = []
    while len(cases) < count:
        kind = RUN_KINDS[len(cases) % len(RUN_KINDS)]
        mutated = copy.deepcopy(run)
        path, value = rng.choice(fields)
        where = _key(path)
        if kind == "wrong_type":
            choices = [w for w in WRONG if type(w) is not type(value)]
            _set(mutated, path, copy.deepcopy(rng.choice(choices)))
        elif kind == "huge_number":
            _set(mutated, path, rng.choice(HUGE))
        elif kind == "missing_key":
            parent = mutated
            for part in path[:-1]:
                parent = parent[part]
            del parent[path[-1]]
        elif kind == "deep_nesting":
            _set(mutated, path, json.loads("[" * 50 + "]" * 50))
        if kind == "cut_text":
            cut = rng.randrange(1, len(text))
            cases.append((kind, f"cut at {cut}", text[:cut]))
        elif kind == "not_utf8":
            at = rng.randrange(len(text))
            cases.append((kind, f"byte {at}", text[:at] + b"\xff\xfe" + text[at:]))
        else:
            cases.append((kind, where, json.dumps(mutated, allow_nan=True).encode()))
    return cases


def render_outcome(path: Path, out: Path) -> str:
    """'rendered', 'refused' (a one-line ConfigError) or 'crash: ...' for one `report` of path."""
    from aitune_ray.report import render_run_file

    try:
        render_run_file(path, out)
    except ConfigError as exc:
        if "\n" in str(exc):
            return f"crash: a message of several lines: {exc}"
        left = sorted(p.name for p in out.glob(f"{path.stem}*") if p.is_file()) if out.exists() else []
        return "refused" if not left else f"partial: refused, but wrote {left}"
    except Exception as exc:  # noqa: BLE001 - counted
        return f"crash: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return "rendered"


def fuzz_run_records(run_json: Path, folder: Path, count: int = 240) -> tuple[Counter, list[str]]:
    """Counts by outcome (and by kind), with every crash described."""
    run = json.loads(run_json.read_text())
    counts, failures = Counter(), []
    for index, (kind, where, data) in enumerate(run_record_cases(run, count)):
        case = folder / f"case-{index}" / run_json.name
        case.parent.mkdir(parents=True)
        case.write_bytes(data)
        outcome = render_outcome(case, case.parent / "out")
        counts[outcome.partition(":")[0]] += 1
        counts[f"kind {kind}"] += 1
        if outcome not in ("rendered", "refused"):
            failures.append(f"{kind} {where}: {outcome}")
    counts["mutations"] = count
    return counts, failures


def table(title: str, counts: Counter) -> str:
    rows = [f"{title}", *(f"  {k:<40} {v:>5}" for k, v in sorted(counts.items()))]
    return "\n".join(rows)


def main() -> int:
    import tempfile
    import time

    with tempfile.TemporaryDirectory(prefix="aitune-ray-fuzz-") as scratch:
        start = time.perf_counter()
        jobs, job_failures = fuzz_jobs(Path(scratch))
        middle = time.perf_counter()
        checkpoints, checkpoint_failures = fuzz_checkpoints(Path(scratch))
        end = time.perf_counter()
        from tests.report_helpers import run_quick_job

        (Path(scratch) / "job").mkdir()
        record = run_quick_job(Path(scratch) / "job").with_suffix(".json")
        (Path(scratch) / "records").mkdir()
        runs, run_failures = fuzz_run_records(record, Path(scratch) / "records")
        last = time.perf_counter()
    print(table(f"job files ({middle - start:.1f} s, seed {JOB_SEED})", jobs))
    print(table(f"checkpoints ({end - middle:.1f} s, seed {CHECKPOINT_SEED})", checkpoints))
    print(table(f"run records ({last - end:.1f} s with the job, seed {RUN_SEED})", runs))
    for failure in job_failures + checkpoint_failures + run_failures:
        print("FAILED", failure)
    return 1 if job_failures or checkpoint_failures or run_failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
