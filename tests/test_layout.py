"""The tree's shape, read from the source with ast: no import cycles, and Ray only where Ray belongs."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("aitune_ray", "actors")


def _files() -> dict[str, Path]:
    files = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            files[name.removesuffix(".__init__")] = path
    return files


def _imports(name: str, path: Path) -> set[str]:
    """Every name imported anywhere in the file (module level and inside functions), made absolute."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    files = _files()

    def owner(target: str) -> str | None:
        while target and target not in files:
            target = target.rpartition(".")[0]
        return target or None

    graph = {}
    for name, path in files.items():
        ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = {o for t in _imports(name, path) if (o := owner(t)) and o != name and o not in ancestors}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def test_no_import_cycles_among_the_files_of_aitune_ray_and_actors():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# ----- the layers ------------------------------------------------------------------------------------------
#: From the bottom up. A file may import files of its own layer or of a layer below, never above. A name is a
#: module or package below aitune_ray (or "actors"); a file belongs to the longest name that contains it.
LAYERS = (
    ("base", ("version", "errors", "records", "runtime", "model", "measure")),
    # one procedure for everything that is chosen, below the strategies and the kernel forge (DESIGN.md)
    ("decision", ("decision",)),
    ("components", ("backend", "kernel_forge")),
    # the worker core and the seam that strategies talk to
    ("worker core and executor seam", ("worker",)),
    # the report model (report.model) and its renderers, below the strategies that fill it
    ("reports", ("report",)),
    ("strategies", ("tune_strategy",)),
    # the executors behind the seam (inline, journaling, Ray) and the node checks they run
    ("executors", ("executors", "cluster", "actors")),
    # tune(), the Module, the checkpoint that saves and loads a Module, inspect/wrap and profile
    ("API", ("api", "checkpoint", "inspecting", "jit", "performance")),
    ("job and command", ("command", "__main__", "testing", "")),   # "": the package aitune_ray
)


def _layer_of(name: str) -> int | None:
    """The layer index of a file's dotted name, by the longest layer entry that contains it."""
    parts = name.split(".")
    local = ".".join(parts[1:]) if parts[0] == "aitune_ray" else name
    best, found = -1, None
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if entry == "" and parts[0] == "aitune_ray" and best < 0:
                found = index
            elif entry and (local == entry or local.startswith(entry + ".")) and len(entry) > best:
                best, found = len(entry), index
    return found


def _targets(name: str, path: Path, files: dict[str, Path]) -> set[str]:
    """The files that a file imports (module level and inside functions): `from package import name` points
    at the module name where it is one, else at the package; the root package counts as a file of its own,
    so a module reading `from aitune_ray import __version__` points at the top."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def owner(target: str) -> str | None:
        while target and target not in files:
            target = target.rpartition(".")[0]
        return target or None

    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(o for alias in node.names if (o := owner(alias.name)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                o = f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else owner(base)
                if o:
                    found.add(o)
    return found - {name}


def _upward(edges: dict[str, set[str]]) -> list[str]:
    """Every import that runs up the layers, as "importer (layer) -> imported (layer)"."""
    out = []
    for name, targets in sorted(edges.items()):
        mine = _layer_of(name)
        for target in sorted(targets):
            theirs = _layer_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                out.append(f"{name} ({LAYERS[mine][0]}) -> {target} ({LAYERS[theirs][0]})")
    return out


def test_every_file_has_a_layer():
    assert [name for name in _files() if _layer_of(name) is None] == []


def test_no_import_runs_up_the_layers():
    files = _files()
    edges = {name: _targets(name, path, files) for name, path in files.items()}
    assert _upward(edges) == []


def test_the_layer_check_finds_an_arrow_up_and_reads_the_root_package_as_the_top(tmp_path):
    leaf = tmp_path / "format.py"
    leaf.write_text("def f():\n    from aitune_ray import __version__\n    from aitune_ray import backend\n")
    files = {"aitune_ray": Path("__init__.py"), "aitune_ray.backend": Path("b"), "aitune_ray.checkpoint.format": leaf}
    targets = _targets("aitune_ray.checkpoint.format", leaf, files)
    assert targets == {"aitune_ray", "aitune_ray.backend"}
    assert _upward({"aitune_ray.checkpoint.format": targets}) == [
        "aitune_ray.checkpoint.format (API) -> aitune_ray (job and command)"]
    assert _upward({"aitune_ray.measure.timing": {"aitune_ray.tune_strategy.report"},
                    "aitune_ray.tune_strategy.report": {"aitune_ray.measure.timing"}}) == [
        "aitune_ray.measure.timing (base) -> aitune_ray.tune_strategy.report (strategies)"]
    assert _layer_of("aitune_ray.kernel_forge.kernel_provider.torch_sdpa") == _layer_of("aitune_ray.backend")
    assert _layer_of("actors.tuner") == _layer_of("aitune_ray.cluster.pool")


def test_the_report_model_lives_below_the_strategies_and_its_old_path_still_imports():
    """report/ imports nothing of tune_strategy/ (the model moved down into report.model); user code that imports
    it from tune_strategy.report gets the very same classes."""
    files = _files()
    edges = {name: _targets(name, path, files) for name, path in files.items()}
    assert [(n, t) for n, ts in edges.items() if n.startswith("aitune_ray.report") for t in ts
            if t.startswith("aitune_ray.tune_strategy")] == []
    assert _layer_of("aitune_ray.report.model") < _layer_of("aitune_ray.tune_strategy.report")
    from aitune_ray.report import model
    from aitune_ray.tune_strategy import ModuleReport, TuningReport
    from aitune_ray.tune_strategy import report as old

    assert (old.ModuleReport, old.TuningReport, ModuleReport, TuningReport) == (
        model.ModuleReport, model.TuningReport, model.ModuleReport, model.TuningReport)


def test_only_the_cluster_package_and_the_actors_import_ray():
    files = _files()
    importers = sorted(name for name, path in files.items()
                       if any(t == "ray" or t.startswith("ray.") for t in _imports(name, path)))
    assert importers, "the search found no Ray import at all"
    assert [n for n in importers if not n.startswith(("aitune_ray.cluster", "actors"))] == []


def test_a_backend_class_declares_what_it_is_and_a_wrong_declaration_fails_at_once():
    import pytest

    from aitune_ray.backend import Backend, ONNXRuntimeBackend, TorchAOBackend
    from aitune_ray.checkpoint.format import package_versions
    from aitune_ray.records.imports import class_path

    for name, value in (("is_jit", "yes"), ("libraries", "onnxruntime"), ("build_cost", 0),
                        ("default_tolerance", -1.0), ("config_class", dict)):
        with pytest.raises(TypeError, match=name):
            type("Wrong", (Backend,), {name: value, "_build": None, "_infer": None})
    assert ONNXRuntimeBackend.libraries == ("onnxruntime", "onnx") and TorchAOBackend.libraries == ("torchao",)
    recorded = package_versions([class_path(ONNXRuntimeBackend)])
    assert "onnxruntime" in recorded and "torchao" not in recorded
