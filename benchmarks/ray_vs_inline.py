"""The same MaxThroughput job inline and on Ray, side by side in one run; prints a table.

    python benchmarks/ray_vs_inline.py --model mlp --backends jit,jit-max,ao-int8wo,ao-int8dq --out ray.md
    python benchmarks/ray_vs_inline.py --model bert --runs inline,ray:1,ray:2 --out bert.md
    python benchmarks/ray_vs_inline.py --model pipeline --backends jit,onnx --out pipeline.md

Models as in backends.py (mlp, encoder, bert, pipeline). For the pipeline, both modules are tuned in one
tune() call, one module after the other, and the wall times cover both; the table lists each module's
candidates.

--runs lists the runs: "inline" (one process, one GPU, one candidate after another), "ray:N" (a local
Ray with N tuner actors, one per GPU, started by the run; "ray:NxK": K actors share each GPU, taking turns
at it for their timings, see aitune_ray.measure.turns) and "cluster:N" (N actors on a Ray head started
before the run, as `ray start --head` starts one for `ray job submit`: Ray's own start is then not in the
run's wall; each such run has a head of its own, with the same fresh cache folders as the run). Each run is a process of its own, started one after the other,
with fresh, empty Inductor and Triton cache folders, so no run reuses another's compiled kernels or
CUDA context, while candidates within a run may share them (in one process inline; through the node's
disk on Ray), as they would for a user. A run that crashes or passes --run-timeout is reported as such,
and the others still count.

Reports: each candidate's time inline (build + check + profile) and in the largest Ray run; per run the
wall time (everything: Ray start, actors, recording, eager baseline, candidates, decision), speedup over
inline and efficiency (speedup / GPUs), Ray's fixed overhead (Ray start until the last actor was up and
answered, which overlaps the driver's recording; its warm-up goes on beside until the first task), the
ideal schedule on N GPUs (the larger of the longest candidate and the inline candidate total over N, from
the inline times) and the critical-path bound (the longest candidate), and whether each run chose the
same backend as inline. Then, per run, where the time went, from the executor's progress events: time
before the first event (Ray's start and the recording), the eager baseline, the candidates as the driver
saw them against their worker-timed build + check + profile (the difference is dispatch, the wait for the
actor and result transfer), the re-measure, the chosen backend's restore on the driver (materialize: a JIT
backend is compiled again there on Ray, reused inline), and on Ray each actor's process start, warm-up
parts and the compile and torch threads it was given (inline: the driver's). With a run repeated
(--runs inline,ray:1,inline,ray:1,...), a pairs table: per run name, its median wall over inline's median,
each pair's ratio (the i-th inline run with the i-th of that name), the same less the re-measure, and
each pair's start lag (the Ray run's first build after the end of inline's eager baseline).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aitune_ray as ait  # noqa: E402
from aitune_ray.records.imports import short_name  # noqa: E402
from aitune_ray.measure.timing import MeasureConfig  # noqa: E402
from aitune_ray.runtime.warm_up import WARM_UP_MODES  # noqa: E402
from backends import BACKENDS, MODELS, make_model, wrap_model  # noqa: E402
from results_table import fresh_caches  # noqa: E402


def parse_run(text: str) -> tuple[str, int]:
    """("inline", 1) or ("ray", N) from "inline", "ray:N", "cluster:N", either with "xK" after N (K actors
    per GPU, see actors_per_gpu) or with ":WARMUP" (see run_warm_up). A cluster run connects to a Ray head
    started before it (see HeadNode)."""
    kind, _, rest = text.partition(":")
    count, _, warm = rest.partition(":")
    gpus, _, per_gpu = count.partition("x")
    if kind == "inline" and not rest:
        return "inline", 1
    if (kind in ("ray", "cluster") and gpus.isdigit() and int(gpus) >= 1 and (not per_gpu or per_gpu.isdigit()
                                                                               and int(per_gpu) >= 1)
            and (not warm or warm in WARM_UP_MODES)):
        return "ray", int(gpus)
    raise SystemExit(f"a run is 'inline', 'ray:N', 'cluster:N', either as 'ray:NxK' (K actors per GPU) or with "
                     f"':WARMUP' (N, K >= 1, WARMUP one of {', '.join(WARM_UP_MODES)}), not {text!r}")


def actors_per_gpu(text: str) -> int | None:
    """The actors that share each GPU in a Ray run: "ray:1x2" -> 2 (gpus_per_actor=0.5), "ray:1x1" -> 1;
    None without "x": RayExecutor's own choice (aitune_ray.cluster.layout)."""
    count = text.split(":")[1] if ":" in text else ""
    per_gpu = count.partition("x")[2]
    return int(per_gpu) if per_gpu else None


class HeadNode:
    """A Ray head on this machine, started before a cluster run and stopped after it, as `ray start --head`
    starts one for `ray job submit`: the run's wall then holds no Ray start. env: its processes' environment
    (the run's fresh cache folders: the actors are the head's processes, not the run's). Started with --block
    as a child process of this one, so that stopping it (SIGTERM to that process, which then stops the Ray
    processes it started) ends only what it started."""

    def __init__(self, gpus: int, env: dict):
        import socket

        with socket.socket() as probe:   # a free port for the GCS
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        # Ray's command line through this Python, which finds a Ray that has no console script installed
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
               f"--num-gpus={gpus}", "--include-dashboard=false", "--disable-usage-stats"]
        print(f"starting a Ray head for the cluster run at {self.address}", flush=True)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.started = threading.Event()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        if not self.started.wait(120):
            self.stop()
            raise SystemExit("the Ray head did not start within 120 s:\n" + "".join(self.output[-40:]))

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)
            if "Ray runtime started" in line:
                self.started.set()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._forget()

    def _forget(self) -> None:
        """Remove Ray's note of the last `ray start` when it still names this head: a head stopped by a
        signal leaves it, and a later ray.init() without an address would connect to the stopped head."""
        try:
            from ray._private.utils import get_ray_address_file

            note = Path(get_ray_address_file(None))
            if note.exists() and note.read_text().strip().endswith(":" + self.address.rpartition(":")[2]):
                note.unlink()
        except Exception as exc:   # another Ray: nothing to forget
            print(f"Ray's note of the stopped head was left: {exc}", file=sys.stderr)


def run_warm_up(text: str) -> str:
    """The actors' warm-up of a Ray run: "ray:1:imports" -> "imports"; RayExecutor's default otherwise."""
    return text.split(":")[2] if text.count(":") == 2 else "compile"


def short_label(spec: dict) -> str:
    """A backend spec as a short name: its class, the config values that tell candidates apart, its delegate."""
    name = short_name(spec.get("type", "?"))
    config = spec.get("config") or {}
    keys = [str(config[k]) for k in ("mode", "quantization", "provider") if config.get(k)]
    label = name + (f"({', '.join(keys)})" if keys else "")
    return label + (f" + {short_label(spec['delegate'])}" if spec.get("delegate") else "")


def timed(obj, method: str) -> list[float]:
    """Wrap obj.method to record how long each call takes; returns the list it appends to."""
    seconds: list[float] = []
    real = getattr(obj, method)

    def wrapper(*a, **k):
        begun = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            seconds.append(time.perf_counter() - begun)

    setattr(obj, method, wrapper)
    return seconds


def _spans(events: list[dict], task: str, start: str) -> list[tuple[dict, dict]]:
    """(start event, done event) pairs of one task kind, matched by module and key, on the driver's clock."""
    open_, pairs = {}, []
    for e in events:
        if e.get("task") != task:
            continue
        ident = (e.get("module"), e.get("key"))
        if e.get("event") == start:
            open_[ident] = e
        elif e.get("event") == "done" and ident in open_:
            pairs.append((open_.pop(ident), e))
    return pairs


def time_budget(events: list[dict], results: list, identities: list[dict], started_wall: float, wall: float,
                materialize_s: float) -> dict:
    """Where a run's wall time went, from its progress events (driver clock), its results (worker-timed
    build + check + profile) and its actors' own start and warm-up times."""
    import torch._inductor.config as inductor_config

    first = min((e["time"] for e in events), default=started_wall)
    baseline = _spans(events, "baseline", "measuring")
    remeasure = _spans(events, "remeasure", "remeasuring")
    builds = _spans(events, "build", "building")
    worker_s = {r.key: r.total_s for r in results}
    seen_s = sum(done["time"] - begun["time"] for begun, done in builds)
    budget = {"before the first event (Ray start, recording) s": first - started_wall,
              "eager baseline s (driver-seen)": sum(d["time"] - b["time"] for b, d in baseline),
              "candidates, driver-seen s (sum)": seen_s,
              "candidates, worker-timed s (sum)": sum(worker_s.get(b["key"], 0.0) for b, _ in builds),
              "re-measure s": sum(d["time"] - b["time"] for b, d in remeasure),
              "materialize on the driver s": materialize_s}
    budget["dispatch + transfer s (driver-seen - worker-timed)"] = (budget["candidates, driver-seen s (sum)"]
                                                                    - budget["candidates, worker-timed s (sum)"])
    actor_s = [d["ended_at"] - d["began_at"] for _, d in builds if d.get("began_at") is not None]
    if actor_s:   # the actor's own time per build call, around the worker's (module fetch, artifact packing)
        began = [(b, d) for b, d in builds if d.get("began_at") is not None]
        budget["build calls on the actors s (sum)"] = sum(actor_s)
        # The same node's clock: the wait before each call began on the actor, and after it ended (their sum
        # is the driver-seen time less the actor's)
        budget["builds: dispatch until the call began on the actor s (sum)"] = sum(
            d["began_at"] - b["time"] for b, d in began)
        budget["builds: the call's end on the actor until the driver's done event s (sum)"] = sum(
            d["time"] - d["ended_at"] for _, d in began)
        budget["timeline: first build began on the actor at s"] = min(d["began_at"] for _, d in began) - started_wall
        budget["timeline: last build done at s"] = max(d["time"] for _, d in builds) - started_wall
    on_driver = [b for b, _ in baseline if str(b.get("gpu", "")).startswith("driver")]
    budget["eager baseline timed on"] = "the driver" if on_driver else ("an actor" if identities else "the driver")
    if identities:
        # The last actor's start on the driver's clock: Ray launched its process, it imported torch and the
        # worker core (when Ray fetched the actor's class), its __init__ began, found its GPU (CUDA's start).
        # With several actors (those that share a GPU start in two waves) also the first one's launch and answer.
        for label, field in (("process launched", "process_started_at"), ("class import began", "import_began_at"),
                             ("class imported", "imported_at"), ("__init__ began", "started_at"),
                             ("GPU found (CUDA up)", "described_at"), ("up (answered)", "ready_at"),
                             ("warm-up began", "warm_up_began_at"), ("warm-up ended", "warm_up_ended_at")):
            stamps = [i[field] for i in identities if i.get(field)]
            if stamps:
                budget[f"timeline: actor {label} at s"] = max(stamps) - started_wall
                if len(identities) > 1 and field in ("process_started_at", "ready_at"):
                    budget[f"timeline: first actor {label} at s"] = min(stamps) - started_wall
        budget["actor process start s (after the driver began)"] = max(
            (i.get("started_at") or started_wall) - started_wall for i in identities)
        warm = [i.get("warm_up") or {} for i in identities]
        parts = sorted({k for w in warm for k, v in w.items() if k.endswith("_s") and k != "warm_up_s"})
        for part in parts + ["warm_up_s"]:
            budget[f"actor warm-up: {part}"] = max((w.get(part, 0.0) for w in warm), default=0.0)
        budget["actor warm-up: mode"] = ", ".join(sorted({str(w.get("mode", "-")) for w in warm}))
        budget["actor warm-up: skipped (stopped by the first task)"] = ", ".join(
            sorted({step for w in warm for step in w.get("skipped", [])})) or "none"
        budget["compile threads (actor)"] = max((w.get("compile_threads", 0) for w in warm), default=0)
        budget["torch threads (actor)"] = max((i.get("threads", 0) for i in identities), default=0)
    else:
        budget["compile threads (inline)"] = inductor_config.compile_threads
        budget["torch threads (inline)"] = torch.get_num_threads()
    profiles = _spans(events, "profile", "planning")
    from aitune_ray.cluster.forge import EVENTS as FORGE_EVENTS

    forge = [pair for task, start in sorted(set(FORGE_EVENTS.values())) for pair in _spans(events, task, start)]
    if forge:
        budget["kernel forge tasks s (sum)"] = sum(d["time"] - b["time"] for b, d in forge)
    for name, spans in (("eager baseline", baseline), ("re-measure", remeasure), ("plan's profile", profiles),
                        ("kernel forge tasks", sorted(forge, key=lambda p: p[0]["time"]))):
        if spans:
            budget[f"timeline: {name} from / to s"] = (f"{spans[0][0]['time'] - started_wall:.1f} / "
                                                       f"{spans[-1][1]['time'] - started_wall:.1f}")
    budget["timeline: last event at s"] = max((e["time"] for e in events), default=started_wall) - started_wall
    budget["wall s"] = wall
    # The re-measure's rounds double when its spread is too wide to decide, on either side: without it the
    # two runs compare the same work
    budget["wall less re-measure s"] = wall - budget["re-measure s"]
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in budget.items()}


def tune_once(run_name: str, args, device, dtype) -> dict:
    """One run, in this process: tune the model and return plain numbers."""
    kind, gpus = parse_run(run_name)
    model, data = make_model(args.model, device, dtype)
    names = args.backends.split(",")
    root, _ = wrap_model(args.model, model, lambda: ait.MaxThroughputStrategy(
        [BACKENDS[name]() for name in names], measure_config=MeasureConfig(max_seconds=1.0)))
    started_wall, started = time.time(), time.perf_counter()
    logs = str(Path(args.log_dir) / run_name.replace(":", "-")) if args.log_dir else None
    events: list[dict] = []
    per_gpu = actors_per_gpu(run_name)
    # The executor's own layout: on all of this machine's GPUs, or capped at one actor per GPU on fewer.
    own = per_gpu is None and gpus >= max(1, torch.cuda.device_count())
    executor = (ait.InlineExecutor(progress=events.append) if kind == "inline"
                else ait.RayExecutor(args.address if run_name.startswith("cluster:") else None,
                                     max_actors=None if own else gpus * (per_gpu or 1),
                                     gpus_per_actor=None if per_gpu is None else 1 / per_gpu, log_dir=logs,
                                     progress=events.append, warm_up=run_warm_up(run_name)))
    if args.run_timeout:   # shortly before the parent kills a hung run: every stack, the driver's and the actors'
        # (faulthandler's own thread needs no GIL: it also reports a hang inside a C call or at exit)
        faulthandler.dump_traceback_later(max(1.0, args.run_timeout - 15), exit=False)
        timer = threading.Timer(max(1.0, args.run_timeout - 20), dump_stacks, (executor,))
        timer.daemon = True
        timer.start()
    materialized = timed(executor, "materialize")
    opened = timed(executor, "open")
    closed = timed(executor, "close")
    identities: list[dict] = []
    put_s, turn_waits = 0.0, []
    try:
        report = ait.tune(root, data, device=device, executor=executor,
                          call_as_given=True)  # every module, one after another
        overhead = None
        if kind == "ray":   # when the last actor was up and warmed (it said so itself), from Ray's start
            import ray   # each actor's identity now: its warm-up's end (it runs on beside the first task)

            identities = ray.get([s.actor.identity.remote() for s in executor.pool.alive()])
            turn_waits = [stats["turn_wait_s"] for stats in executor.actor_stats()]
            put_s = executor.put_s
            ready = [i.get("ready_at") for i in identities]
            overhead = max(r for r in ready if r) - started_wall if any(ready) else None
            actors = len(executor.pool.alive())
    finally:
        executor.close()
    wall = time.perf_counter() - started
    several = len(report.modules) > 1
    candidates, modules, chosen, chosen_key, speedups = {}, {}, {}, {}, {}
    for mod in report.modules:
        ids = []
        for r in mod.results:  # in the job's order inline; in finishing order on Ray
            ident = f"{mod.module}/{r.key}" if several else r.key
            candidates[ident] = (r.backend, r.status, r.total_s, r.gpu)
            ids.append(ident)
        modules[mod.module] = ids
        result = mod.chosen_result()
        chosen[mod.module] = short_label(result.spec) if result else "eager"
        chosen_key[mod.module] = mod.chosen
        speedups[mod.module] = dict(mod.speedups)
    results = [r for mod in report.modules for r in mod.results]
    phases = time_budget(events, results, identities, started_wall, wall, sum(materialized))
    phases.update(remeasure_shape(report))
    if kind == "ray":
        phases["module and samples into the object store s"] = round(put_s, 2)
        # actors that share a GPU: how long their timings and builds waited for a turn there, each
        phases["waits for a turn at the shared GPU s (per actor)"] = ", ".join(f"{w:.2f}" for w in turn_waits)
        phases["executor.open() until it returned s"] = round(max(opened, default=0.0), 2)
        # a local Ray starts on a thread of its own, while the driver records, times eager and profiles
        phases["Ray start and actor creation (on open's thread) s"] = round(executor.open_s or 0.0, 2)
        phases["actors per GPU (the executor's choice)"] = (
            f"{executor.layout.actors_per_gpu}: {executor.layout.reason}" if executor.layout is not None
            else f"{round(1 / executor.gpus_per_actor) if executor.gpus_per_actor else 0}"
                 + (", as asked" if per_gpu else ", one per GPU on a Ray not started by the run"))
    phases["executor.close() s"] = round(sum(closed), 2)
    if getattr(executor, "shutdown_s", None) is not None:
        phases["of which ray.shutdown() s"] = round(executor.shutdown_s, 2)
    if report.failures:
        print(f"{run_name}: modules that failed to tune: {report.failures}", file=sys.stderr)
    per_gpu = round(1 / executor.gpus_per_actor) if kind == "ray" and executor.gpus_per_actor else 1
    return {"run": run_name, "kind": kind, "gpus": max(1, actors // per_gpu) if kind == "ray" else 1,
            "actors": actors if kind == "ray" else 0, "wall_s": wall, "phases": phases,
            "failures": dict(report.failures),
            "overhead_s": overhead, "chosen": chosen, "chosen_key": chosen_key, "speedups": speedups,
            "candidates": candidates, "modules": modules,
            "candidate_total_s": sum(t for _, _, t, _ in candidates.values()),
            "markdown": "\n".join(m.markdown() for m in report.modules)}


def remeasure_shape(report) -> dict:
    """What set the re-measure's length, per module: how many candidates it re-timed, the most paired rounds
    one of them had (doubled when the first rounds did not decide), and eager's first timing at each batch
    size (MaxThroughput re-times a further group only while its first timings are not clearly behind it)."""
    out = {}
    for mod in report.modules:
        prefix = f"{mod.module}: " if len(report.modules) > 1 else ""
        out[f"{prefix}re-measure: candidates re-timed"] = sum(1 for r in mod.results if r.remeasured)
        rounds = [(v.get("interval") or {}).get("rounds", 0) for v in mod.verdicts.values()]
        out[f"{prefix}re-measure: most paired rounds"] = max(rounds, default=0)
        for bs, timing in sorted(mod.baseline.items()):
            out[f"{prefix}eager's first timing at bs {bs} ms"] = round(timing["median_ms"], 3)
    return out


def dump_stacks(executor) -> None:
    """Each tuner actor's threads into its own log (SIGUSR1, actors/setup.py)."""
    for slot in getattr(getattr(executor, "pool", None), "slots", None) or []:
        pid = (slot.identity() or {}).get("pid")
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGUSR1)
    sys.stderr.flush()


def run_child(run_name: str, args) -> dict:
    """One run in a fresh process (a crash or a hang costs that run only)."""
    out = Path(tempfile.mkdtemp(prefix="ray-vs-inline-")) / "run.json"
    env = fresh_caches(os.environ)
    cmd = [sys.executable, __file__, "--child", run_name, "--child-out", str(out), "--model", args.model,
           "--device", args.device, "--backends", args.backends]
    for flag, value in (("--log-dir", args.log_dir), ("--dtype", args.dtype), ("--run-timeout", args.run_timeout)):
        cmd += [flag, str(value)] if value else []
    head = HeadNode(args.gpus, env) if run_name.startswith("cluster:") else None
    try:
        return _run_process(run_name, cmd + (["--address", head.address] if head else []), env, out, args)
    finally:
        if head is not None:
            head.stop()


def _run_process(run_name: str, cmd: list[str], env: dict, out: Path, args) -> dict:
    print(f"run {run_name} ...", flush=True)
    started, hung = time.perf_counter(), None
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.run_timeout)
        failure = None if proc.returncode == 0 else f"exit code {proc.returncode}"
        tail = (proc.stdout + proc.stderr)[-3000:]
    except subprocess.TimeoutExpired as exc:
        failure = f"timed out after {args.run_timeout:g} s"
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr or "")
        tail = err[-12000:]
        if out.exists():   # it tuned and wrote its numbers, then did not exit
            failure, hung = None, tail
            print(f"run {run_name}: wrote its result, then did not exit within {args.run_timeout:g} s:\n{tail}", flush=True)
    if failure is None and out.exists():
        data = json.loads(out.read_text())
        if data.get("failures") and not data.get("candidates"):
            failure = f"every module failed to tune: {data['failures']}"
    if failure is None and out.exists():
        print(f"run {run_name}: {data['wall_s']:.1f} s", flush=True)
        return {**data, "did_not_exit": hung} if hung else data
    print(f"run {run_name} failed ({failure}):\n{tail}", flush=True)
    return {"run": run_name, "failed": failure or "no result written", "tail": tail,
            "wall_s": time.perf_counter() - started}


def ideal_schedule(inline: dict, gpus: int) -> tuple[float, float]:
    """(ideal wall on gpus GPUs, longest candidate): modules are tuned one after another, so per module the
    larger of its longest candidate and its total over the GPUs, summed over modules."""
    ideal = longest = 0.0
    for ids in inline["modules"].values():
        times = [inline["candidates"][i][2] for i in ids] or [0.0]
        ideal += max(max(times), sum(times) / gpus)
        longest += max(times)
    return ideal, longest


def verdict(inline: dict, other: dict) -> str:
    several = len(inline["modules"]) > 1
    parts = []
    for module in inline["modules"]:
        a_key, b_key = inline["chosen_key"].get(module), other["chosen_key"].get(module)
        text = f"{other['chosen'].get(module, '-')} ({'same' if a_key == b_key else 'differs'}"
        if a_key != b_key:
            base = inline["speedups"][module]
            a = base.get(a_key, 1.0) if a_key else 1.0
            b = base.get(b_key, float("nan")) if b_key else 1.0
            text += f"; {b / a:.1%} of the inline choice's speedup, measured inline"
        parts.append((f"{module}: " if several else "") + text + ")")
    return "; ".join(parts)


def pairs(runs: list[dict]) -> list[str]:
    """Where a run name repeats (--runs inline,ray:1,inline,ray:1,...): per name, the median wall over inline's
    median, the ratio of each pair (the i-th inline run with the i-th of that name, in run order), and the
    same less the re-measure, whose rounds double when they do not decide. Failed runs are left out."""
    done = [r for r in runs if "failed" not in r]
    inline = [r for r in done if r.get("kind") == "inline"]
    names = list(dict.fromkeys(r["run"] for r in done if r.get("kind") != "inline"))
    if len(inline) < 2 and not any(sum(r["run"] == n for r in done) > 1 for n in names):
        return []

    def less(r: dict) -> float | None:
        return (r.get("phases") or {}).get("wall less re-measure s")

    def lags(these: list[dict]) -> str:
        """Each pair's Ray start lag: the first build on an actor after the end of inline's eager baseline,
        where inline's first build begins (both on their run's own clock)."""
        out = []
        for r, i in zip(these, inline):
            began = (r.get("phases") or {}).get("timeline: first build began on the actor at s")
            baseline = str((i.get("phases") or {}).get("timeline: eager baseline from / to s", ""))
            if isinstance(began, (int, float)) and " / " in baseline:
                out.append(f"{began - float(baseline.split(' / ')[1]):.1f}")
        return ", ".join(out) + " s" if out else "-"

    def ratios(these: list[dict], key) -> str:
        values = [(key(r), key(i)) for r, i in zip(these, inline)]
        return ", ".join(f"{a / b:.2f}x" for a, b in values if a is not None and b)

    def median_ratio(these: list[dict], key) -> str:
        a = [key(r) for r in these if key(r) is not None]
        b = [key(i) for i in inline if key(i) is not None]
        return f"{statistics.median(a):.1f} / {statistics.median(b):.1f} s, {statistics.median(a) / statistics.median(b):.2f}x" \
            if a and b else "-"

    lines = ["", f"Pairs ({len(inline)} inline run(s); the i-th inline run with the i-th run of each name):", "",
             "| run | runs | median wall / inline's | pair by pair | less the re-measure: medians | pair by pair | "
             "first build after inline's baseline ended, pair by pair |",
             "|---|---|---|---|---|---|---|"]
    for name in names:
        these = [r for r in done if r["run"] == name]
        lines.append(f"| {name} | {len(these)} | {median_ratio(these, lambda r: r['wall_s'])} | "
                     f"{ratios(these, lambda r: r['wall_s']) or '-'} | {median_ratio(these, less)} | "
                     f"{ratios(these, less) or '-'} | {lags(these)} |")
    return lines


def report(args, runs: list[dict], device, dtype) -> str:
    runs = sorted(runs, key=lambda r: (r.get("kind") != "inline", r.get("gpus", 0)))
    inline = next((r for r in runs if r.get("kind") == "inline"), None)
    ray_runs = [r for r in runs if r.get("kind") == "ray"]
    biggest = max(ray_runs, key=lambda r: r["gpus"], default=None)
    lines = []
    if inline is not None:
        per, total = inline["candidates"], inline["candidate_total_s"]
        several = len(inline["modules"]) > 1
        lines += [f"### Ray vs inline: {args.model} on {device} ({dtype}), {len(per)} candidates"
                  + (f" over {len(inline['modules'])} modules ({', '.join(inline['modules'])}), tuned one after "
                     "another" if several else ""), "",
                  "| module | candidate | status inline / Ray | inline s | share of inline total | "
                  f"Ray s ({biggest['gpus'] if biggest else '-'} GPUs) | Ray GPU |", "|---|---|---|---|---|---|---|"]
        for module, ids in inline["modules"].items():
            for ident in ids:
                backend, status, secs, _ = per[ident]
                r = (biggest or {}).get("candidates", {}).get(ident, ("", "-", float("nan"), ""))
                lines.append(f"| {module} | {backend} `{ident[-12:]}` | {status} / {r[1]} | {secs:.1f} | "
                             f"{secs / total:.0%} | {r[2]:.1f} | {r[3]} |")
        _, longest = ideal_schedule(inline, 1)
        lines += ["", f"Inline candidate total {total:.1f} s; the rest of the inline wall "
                      f"({inline['wall_s'] - total:.1f} s) is recording, the eager baseline and the decision. "
                      f"Critical-path bound (longest candidate{', per module, summed' if several else ''}): "
                      f"{longest:.1f} s ({longest / total:.0%} of the inline total).", ""]
    lines += ["| run | GPUs | wall s | Ray fixed overhead s | speedup over inline | efficiency | ideal s, "
              "max(longest, total/N) | wall / ideal | wall / critical path | chosen (vs inline) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        if "failed" in r:
            lines.append(f"| {r['run']} | - | {r['wall_s']:.1f} | - | - | - | - | - | - | failed: {r['failed']} |")
            continue
        overhead = f"{r['overhead_s']:.1f}" if r.get("overhead_s") is not None else "-"
        if inline is None:
            lines.append(f"| {r['run']} | {r['gpus']} | {r['wall_s']:.1f} | {overhead} | - | - | - | - | - | "
                         f"{'; '.join(r['chosen'].values())} |")
            continue
        speedup = inline["wall_s"] / r["wall_s"]
        ideal, longest = ideal_schedule(inline, r["gpus"])
        lines.append(f"| {r['run']} | {r['gpus']} | {r['wall_s']:.1f} | {overhead} | {speedup:.2f}x "
                     f"({r['wall_s'] / inline['wall_s']:.2f} of inline) | {speedup / r['gpus']:.0%} | {ideal:.1f} | "
                     f"{r['wall_s'] / ideal:.2f}x | {r['wall_s'] / longest:.2f}x | {verdict(inline, r)} |")
    lines += pairs(runs)
    for r in runs:
        if r.get("did_not_exit"):
            lines += ["", f"{r['run']} wrote its result and then did not exit within the run's limit (its wall "
                          "time above ends at its result); the end of its output:", "", "```",
                      *r["did_not_exit"].strip().splitlines()[-25:], "```"]
    phased = [r for r in runs if r.get("phases")]
    if phased:
        names = list(dict.fromkeys(k for r in phased for k in r["phases"]))
        lines += ["", "Where the time went (driver clock for events; actors' own clock for their start and "
                      "warm-up; candidates overlap on several GPUs, so their sums can exceed the wall):", "",
                  "| | " + " | ".join(r["run"] for r in phased) + " |", "|---|" + "---|" * len(phased)]
        lines += [f"| {name} | " + " | ".join(str(r["phases"].get(name, "-")) for r in phased) + " |"
                  for name in names]
    lines += ["", "\n\n".join(f"#### {r['run']}\n\n{r['markdown']}" for r in runs if "markdown" in r)]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mlp", choices=MODELS)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backends", default="jit,jit-max,onnx,ao-int8wo")
    parser.add_argument("--dtype", default=None, choices=["float32", "float16", "bfloat16"],
                        help="the model's dtype (default: bfloat16 on a GPU, float32 on the CPU)")
    parser.add_argument("--gpus", type=int, default=max(1, torch.cuda.device_count()),
                        help="actors of the Ray run when --runs is not given (one per GPU)")
    parser.add_argument("--runs", default=None, help="comma list of inline, ray:N and cluster:N "
                        "(default: ray:GPUS,inline; empty: only the --include runs)")
    parser.add_argument("--run-timeout", type=float, default=None, help="seconds one run may take")
    parser.add_argument("--out", default=None, help="markdown file; a .json beside it holds the numbers "
                        "(benchmarks/schedule_sim.py reads it)")
    parser.add_argument("--log-dir", default=None, help="keep each Ray run's actor logs here (their warm-up and "
                        "per-candidate lines), one folder per run")
    parser.add_argument("--include", nargs="*", default=[], help="earlier .json outputs of this benchmark (same "
                        "model and backends) whose runs join the table instead of being run again")
    parser.add_argument("--address", default=None, help=argparse.SUPPRESS)   # the cluster runs' Ray head
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.child:   # what a run did last is in its output's tail when it fails or hangs
        logging.getLogger("aitune_ray").setLevel(logging.INFO)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    if args.child:
        Path(args.child_out).write_text(json.dumps(tune_once(args.child, args, device, dtype), default=str))
        return 0

    names = (args.runs or f"ray:{args.gpus},inline").split(",") if args.runs != "" else []
    for name in names:
        parse_run(name)
    runs = included(args)
    names = [n for n in names if n not in {r["run"] for r in runs}]
    for name in names:
        runs.append(run_child(name, args))
        if args.out:   # after every run, so that a later failure keeps what was measured
            write(args, runs, device, dtype)
    text = report(args, runs, device, dtype)
    print(text)
    if args.out:
        write(args, runs, device, dtype)
    ok = [r for r in runs if "failed" not in r]
    return 0 if ok else 1


def included(args) -> list[dict]:
    """Runs from earlier outputs (each run is a process of its own, so runs made by separate invocations
    on the same machine compare as runs of one invocation do)."""
    runs = []
    for path in args.include:
        data = json.loads(Path(path).read_text())
        if data["model"] != args.model or data["backends"] != args.backends.split(","):
            raise SystemExit(f"{path} is a run of {data['model']} with {','.join(data['backends'])}, not of "
                             f"{args.model} with {args.backends}")
        runs += [r for r in data["runs"].values() if "failed" not in r]
    return runs


def unique_runs(runs: list[dict]) -> dict:
    """{run name: run}, a repeated run named "inline #2", "inline #3" and so on (in the order run)."""
    out: dict = {}
    for r in runs:
        name, n = r["run"], 1
        while name in out:
            n += 1
            name = f"{r['run']} #{n}"
        out[name] = r
    return out


def write(args, runs: list[dict], device, dtype) -> None:
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report(args, runs, device, dtype))
    inline = next((r for r in runs if r.get("kind") == "inline" and "failed" not in r), None)
    rays = [r for r in runs if r.get("kind") == "ray" and "failed" not in r]
    data = {"model": args.model, "device": str(device), "dtype": str(dtype), "backends": args.backends.split(","),
            "runs": unique_runs(runs)}
    if inline:
        data["inline"] = inline
    if rays:   # the largest Ray run, as schedule_sim.py reads it
        biggest = max(rays, key=lambda r: r["gpus"])
        data["ray"], data["gpus"] = biggest, biggest["gpus"]
    Path(args.out).with_suffix(".json").write_text(json.dumps(data, indent=1, default=str))


if __name__ == "__main__":
    raise SystemExit(main())
