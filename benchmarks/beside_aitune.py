"""How long does tuning take here against AITune 0.6.0, and does each one's choice hold in the user's loop?

    python benchmarks/beside_aitune.py --out OUT                     # GPU: ViT-B-sized fp16, bs 8 and 32
    python benchmarks/beside_aitune.py --out OUT --runs aitune,aitune_ray,aitune_ray:inline
    python benchmarks/beside_aitune.py --out OUT --device cpu --size tiny --runs aitune_ray:inline

One script body tunes the model, the same for both: `import aitune.torch as ait` for AITune and
`import aitune_ray as ait` for this project, the same Module, strategy (MaxThroughput), candidates (Inductor
default, Inductor max-autotune, TorchAO fp8 weight-only), dataset (32 samples), batch sizes (8 and 32) and
`ait.tune(...)` call. Each run is a fresh process with fresh Inductor and Triton caches, so no run reuses
another's compiles; the runs take turns in the order given. The wall is the `ait.tune` call alone (for this
project it includes starting Ray); the import is timed apart.

After each tuning, in that process, the user's loop times eager against the tuned module: per batch size,
5 interleaved repeats of 100 back-to-back calls between two synchronizes, the median of each; the speedup is
eager's time over the module's. A choice holds when it is no more than 3% slower than eager at any batch size.
AITune imports TensorRT and nvidia-modelopt when it loads, also for a tuning that builds only Inductor and
TorchAO candidates; where they are absent, stand-ins that only import take their place (install_stand_ins),
and the results name them.
Results: OUT/beside_aitune.json and OUT/beside_aitune.md.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOLD_LIMIT = 0.03
# What AITune 0.6.0 imports when it loads but an Inductor/TorchAO tuning never calls, stood in where absent:
# TensorRT (its TensorRT backend subclasses tensorrt.IOutputAllocator at import), and nvidia-modelopt with what
# it imports.
STAND_INS = ["tensorrt", "modelopt", "huggingface_hub"]
_served: set[str] = set()


class _StandInType(type):
    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(f"{cls.__qualname__}.{name}")


class StandIn(metaclass=_StandInType):
    """An object of a library that is not there: attributes are stand-ins, calls return the object. Such a
    class can be subclassed, called, compared and used as a key; calling into it does nothing, so a run that
    really used the library would fail or measure nothing."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(name)

    def __call__(self, *args, **kwargs):
        return self


def stand_in(name: str) -> type:
    return _StandInType(name.rpartition(".")[2] or name, (StandIn,), {"__qualname__": name})


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = stand_in(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []           # a package: its submodules are stand-ins too
        module.__version__ = "0.0.0"   # read by version checks at import
        return module

    def exec_module(self, module) -> None:
        _served.add(module.__name__)


class _StandInFinder(importlib.abc.MetaPathFinder):
    def __init__(self, tops: set[str]):
        self.tops = tops

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in self.tops:
            return None
        return importlib.machinery.ModuleSpec(fullname, _StandInLoader(), is_package=True)


def install_stand_ins(names: list[str]) -> list[str]:
    """Serve each of names (a top-level package) that cannot be found for real; returns those served. Called
    before the importing package loads; the finder goes last, so every real module is found first."""
    absent = {name for name in names if importlib.util.find_spec(name) is None}
    if absent:
        sys.meta_path.append(_StandInFinder(absent))
    return sorted(absent)


def stand_ins_used() -> list[str]:
    """The stand-in modules imported so far."""
    return sorted(_served)


def user_ms(fn, x, calls: int, sync) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn(x)
    sync()
    return (time.perf_counter() - start) * 1e3 / calls


def user_loop(fns: dict, inputs: dict, sync, calls: int = 100, repeats: int = 5) -> dict:
    """{name: {bs: median ms}}, the names taking turns in an order rotated per repeat."""
    import torch

    out = {name: {} for name in fns}
    names = list(fns)
    with torch.no_grad():
        for bs, x in inputs.items():
            for name in names:
                for _ in range(10):
                    fns[name](x)
            times = {name: [] for name in names}
            for rep in range(repeats):
                for name in names[rep % len(names):] + names[:rep % len(names)]:
                    times[name].append(user_ms(fns[name], x, calls, sync))
            out = {name: {**out[name], bs: statistics.median(times[name])} for name in names}
    return out


def chosen(ait_name: str, module, report) -> str:
    if ait_name == "aitune_ray":
        m = report.modules[0]
        return m.decision
    wrapper = getattr(module, "_self_wrapper", None)
    backends = getattr(wrapper, "backends", None) or {}
    return ", ".join(f"{getattr(b, 'name', type(b).__name__)}" for b in backends.values()) or "eager (passthrough)"


def child(args) -> dict:
    """One tuning in this process: the script body a user writes, with either package as ait."""
    sys.path.insert(0, str(ROOT))
    started = time.perf_counter()
    import torch

    stand_ins: list[str] = []
    if args.impl == "aitune":
        install_stand_ins(STAND_INS)   # names the image lacks; the candidates compared never call them
        import aitune.torch as ait

        stand_ins = stand_ins_used()
    else:
        import aitune_ray as ait
    import_s = time.perf_counter() - started
    from examples.vit.model import make_model

    device = torch.device(args.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    eager = make_model(args.size, dtype=str(dtype).split(".")[-1]).to(device).eval()
    model = make_model(args.size, dtype=str(dtype).split(".")[-1]).to(device).eval()
    side = 224 if args.size == "base" else 32
    dataset = [torch.randn(3, side, side, dtype=dtype, device=device) for _ in range(32)]
    b = ait.backend
    candidates = [b.TorchInductorJitBackend(),
                  b.TorchInductorJitBackend(b.TorchInductorJitBackendConfig(mode="max-autotune")),
                  b.TorchAOBackend(b.TorchAOBackendConfig(quantization="fp8wo" if device.type == "cuda"
                                                          else "int8wo"))]
    module = ait.Module(model, "vit", strategy=ait.MaxThroughputStrategy(candidates))
    extra = {"executor": args.executor} if args.executor else {}
    started = time.perf_counter()
    report = ait.tune(module, dataset, batch_sizes=[8, 32], max_num_batches_per_batch_size=2, device=device,
                      **extra)
    tune_s = time.perf_counter() - started
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    inputs = {bs: torch.randn(bs, 3, side, side, dtype=dtype, device=device) for bs in (8, 32)}
    times = user_loop({"eager": eager, "tuned": module}, inputs, sync)
    speedups = {bs: times["eager"][bs] / times["tuned"][bs] for bs in inputs}
    return {"impl": args.impl, "executor": args.executor or "default", "import_s": import_s, "tune_s": tune_s,
            "stand_ins": stand_ins,
            "chosen": chosen(args.impl, module, report), "user_ms": times, "user_speedup": speedups,
            "holds": all(s >= 1.0 - HOLD_LIMIT for s in speedups.values())}


def run_one(spec: str, args) -> dict:
    impl, _, executor = spec.partition(":")
    with tempfile.TemporaryDirectory(prefix="beside-aitune-") as tmp:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor", TRITON_CACHE_DIR=f"{tmp}/triton",
                   AITUNE_CACHE_DIR=f"{tmp}/aitune", PYTHONUNBUFFERED="1")
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--child", impl, "--result", str(result), "--device", args.device,
               "--size", args.size] + (["--executor", executor] if executor else [])
        started = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, cwd=tmp, timeout=args.run_timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired as exc:
            text = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
            (Path(args.out) / f"{spec.replace(':', '-')}.log").write_text(text)
            return {"run": spec, "error": [f"not done in {args.run_timeout:.0f} s"], "process_s": args.run_timeout,
                    "timed_out": True}
        wall = time.perf_counter() - started
        (Path(args.out) / f"{spec.replace(':', '-')}.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0 or not result.exists():
            return {"run": spec, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:], "process_s": wall}
        return {"run": spec, "process_s": wall, **json.loads(result.read_text())}


def table(runs: list[dict], device: str) -> str:
    lines = [f"Device: {device}. Command: python benchmarks/beside_aitune.py {' '.join(sys.argv[1:])}", "",
             "| run | tune() wall s | import s | process s | choice | user speedup bs 8 | bs 32 | holds |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['run']} | failed: {' '.join(r['error'])[:160]} | | {r['process_s']:.0f} | | | | |")
            continue
        s = r["user_speedup"]
        lines.append(f"| {r['run']} | {r['tune_s']:.1f} | {r['import_s']:.1f} | {r['process_s']:.0f} | "
                     f"{r['chosen'][:160]} | {s['8']:.3f}x | {s['32']:.3f}x | {'yes' if r['holds'] else 'NO'} |")
    stood = sorted({name for r in runs for name in r.get("stand_ins", [])})
    if stood:
        lines += ["", f"Imported as stand-ins (absent here, never called by these candidates): {', '.join(stood)}"]
    walls = {r["run"].partition(":")[0]: r["tune_s"] for r in runs if "tune_s" in r}
    if "aitune" in walls and "aitune_ray" in walls:
        lines += ["", f"This project's wall over AITune's: {walls['aitune_ray'] / walls['aitune']:.2f}x (goal: at most 0.5x)"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder for the results")
    parser.add_argument("--runs", default="aitune,aitune_ray",
                        help="comma-separated IMPL[:EXECUTOR] in turn; IMPL aitune or aitune_ray (default %(default)s)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--size", default="base", help="base (ViT-B/16 sized) or tiny")
    parser.add_argument("--run-timeout", type=float, default=900)
    parser.add_argument("--child", dest="impl", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--executor", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.impl:
        out = child(args)
        Path(args.result).write_text(json.dumps(out, default=str))
        return 0
    if not args.out:
        parser.error("--out is required")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    runs = []
    for spec in [s for s in args.runs.split(",") if s]:
        runs.append(run_one(spec, args))
        text = table(json.loads(json.dumps(runs)), args.device)
        (Path(args.out) / "beside_aitune.md").write_text(text)
        (Path(args.out) / "beside_aitune.json").write_text(json.dumps({"device": args.device, "runs": runs,
                                                                       "argv": sys.argv[1:]}, indent=1))
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
