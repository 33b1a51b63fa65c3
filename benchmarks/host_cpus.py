"""Eager's host-bound call pinned to each CPU in turn, with what else each CPU did meanwhile; prints a table.

    python benchmarks/host_cpus.py --passes 3 --out host_cpus.md

The ViT-B-sized fp16 encoder at batch 8 is host-bound on an H200, and a user's loop over it read 2 to 4.4 ms
per call within one process, depending on the CPU the loop ran on (benchmarks/host_modes.py). This pins the
loop's thread to every CPU the process may use, one after another (the order rotated per pass), and times it
as a user's loop does: bursts of 100 back-to-back calls between two synchronizes, perf_counter. Over each
CPU's bursts it reads, from /proc, what that CPU and its SMT siblings spent on other work: the share of time
stolen by the hypervisor, in interrupts and soft interrupts, and busy with other threads; and how many
device interrupts that CPU took per second. Last, the loop runs unpinned, a burst at a time (--free bursts),
and each burst is read four ways: its wall time per call, the CPU time its thread spent per call
(time.thread_time), how often the thread was descheduled or waited meanwhile (involuntary and voluntary
context switches), and the GPU's SM clock (nvidia-smi every 50 ms); with the CPU it ran on. A slow stretch in
which the thread's CPU time per call rises with the wall time is a host that runs the same Python slower (its
clock, its caches, a neighbour on the same hardware); one in which the wall time rises alone is a thread that
waited (descheduled, or blocked on the GPU); a lower SM clock in the slow bursts points at the GPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from harness_agreement import GpuClocks  # noqa: E402
from host_modes import bursts, current_cpu, encoder_at  # noqa: E402
from publish import publish  # noqa: E402

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_times() -> dict[int, dict[str, int]]:
    """Per CPU, /proc/stat's counters (clock ticks)."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            out[int(name[3:])] = dict(zip(FIELDS, (int(v) for v in values)))
    return out


def interrupts() -> dict[int, int]:
    """Per CPU, the interrupts taken so far (every line of /proc/interrupts with per-CPU counts)."""
    lines = Path("/proc/interrupts").read_text().splitlines()
    cpus = [int(c[3:]) for c in lines[0].split()]
    totals = dict.fromkeys(cpus, 0)
    for line in lines[1:]:
        parts = line.split()[1:1 + len(cpus)]
        if len(parts) == len(cpus) and all(p.isdigit() for p in parts):
            for cpu, count in zip(cpus, parts):
                totals[cpu] += int(count)
    return totals


def siblings(cpu: int) -> list[int]:
    """The other hardware threads of cpu's core (empty when the machine does not say)."""
    path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    if not path.exists():
        return []
    found = []
    for part in path.read_text().strip().split(","):
        low, _, high = part.partition("-")
        found += list(range(int(low), int(high or low) + 1))
    return [c for c in found if c != cpu]


def shares(before: dict, after: dict, cpu: int) -> dict[str, float]:
    delta = {f: after[cpu][f] - before[cpu][f] for f in FIELDS}
    total = sum(delta.values()) or 1
    return {"steal": delta["steal"] / total, "irq": (delta["irq"] + delta["softirq"]) / total,
            "busy": (delta["user"] + delta["nice"] + delta["system"]) / total}


def pinned(model, x, cpu: int, count: int, calls: int) -> dict:
    os.sched_setaffinity(0, {cpu})
    bursts(model, x, 2, calls)   # settle on the CPU
    stat0, irq0, t0 = cpu_times(), interrupts(), time.perf_counter()
    times, _ = bursts(model, x, count, calls)
    stat1, irq1, seconds = cpu_times(), interrupts(), time.perf_counter() - t0
    mate = siblings(cpu)
    return {"cpu": cpu, "ms": times, "own": shares(stat0, stat1, cpu),
            "siblings": {m: shares(stat0, stat1, m)["busy"] for m in mate},
            "irq_per_s": (irq1.get(cpu, 0) - irq0.get(cpu, 0)) / seconds}


def read_bursts(model, x, count: int, calls: int, clocks: GpuClocks | None = None) -> list[dict]:
    """count bursts of calls back to back, each read as wall ms per call, its thread's CPU ms per call, the
    thread's context switches (involuntary: descheduled; voluntary: it waited), the mean SM MHz meanwhile
    (None without a sample) and the CPU it ended on."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    out = []
    with torch.no_grad():
        for _ in range(count):
            sync()
            usage, cpu_s, started = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time(), time.perf_counter()
            for _ in range(calls):
                model(x)
            sync()
            ended, cpu_e, usage_e = time.perf_counter(), time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD)
            mhz = clocks.window(started, ended)[0] if clocks is not None else None
            out.append({"ms": (ended - started) * 1e3 / calls, "thread_ms": (cpu_e - cpu_s) * 1e3 / calls,
                        "descheduled": usage_e.ru_nivcsw - usage.ru_nivcsw, "waited": usage_e.ru_nvcsw - usage.ru_nvcsw,
                        "sm_mhz": mhz, "cpu": current_cpu()})
    return out


def split_lines(free: list[dict]) -> list[str]:
    """The unpinned bursts, the faster half against the slower half: what moved with the wall time."""
    ranked = sorted(free, key=lambda b: b["ms"])
    half = len(ranked) // 2
    if half == 0:
        return []

    def mean(rows, key):
        values = [r[key] for r in rows if r[key] is not None]
        return statistics.fmean(values) if values else None

    def cells(rows):
        ms, thread, mhz = mean(rows, "ms"), mean(rows, "thread_ms"), mean(rows, "sm_mhz")
        return (f"{ms:.2f} | {thread:.2f} | {thread / ms:.0%} | {mean(rows, 'descheduled'):.1f} | "
                f"{mean(rows, 'waited'):.1f} | " + (f"{mhz:.0f}" if mhz is not None else "-"))

    return ["", "| unpinned bursts | wall ms per call | thread CPU ms per call | CPU share | descheduled per burst | "
            "waits per burst | SM MHz |", "|---|---|---|---|---|---|---|",
            f"| faster {half} | {cells(ranked[:half])} |", f"| slower {len(ranked) - half} | {cells(ranked[half:])} |"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--bursts", type=int, default=5, help="bursts per CPU per pass")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--free", type=int, default=40, help="unpinned bursts at the end")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    model, x = encoder_at(args.batch, args.calls, "host_cpus.py")
    allowed = sorted(os.sched_getaffinity(0))
    runs: dict[int, list[dict]] = {cpu: [] for cpu in allowed}
    for index in range(args.passes):
        shift = index * max(1, len(allowed) // args.passes)
        for cpu in allowed[shift:] + allowed[:shift]:
            runs[cpu].append(pinned(model, x, cpu, args.bursts, args.calls))
    os.sched_setaffinity(0, set(allowed))
    clocks = GpuClocks()
    try:
        free = read_bursts(model, x, args.free, args.calls, clocks)
    finally:
        clocks.stop()
    lines = [f"### Eager encoder fp16, batch {args.batch}, pinned to each CPU: ms per call ({args.passes} passes of "
             f"{args.bursts} bursts of {args.calls} calls; CPUs allowed: {len(allowed)})", "",
             "| CPU | SMT siblings | median ms per pass | lowest | stolen | interrupts (share) | device interrupts/s | "
             "siblings busy |", "|---|---|---|---|---|---|---|---|"]
    for cpu, these in runs.items():
        per_pass = [statistics.median(r["ms"]) for r in these]
        everything = [t for r in these for t in r["ms"]]
        mates = sorted({m for r in these for m in r["siblings"]})
        busy = [statistics.fmean(r["siblings"].values()) for r in these if r["siblings"]]
        lines.append(f"| {cpu} | {', '.join(map(str, mates)) or '-'} | {', '.join(f'{m:.2f}' for m in per_pass)} | "
                     f"{min(everything):.2f} | {max(r['own']['steal'] for r in these):.1%} | "
                     f"{max(r['own']['irq'] for r in these):.1%} | {statistics.fmean(r['irq_per_s'] for r in these):.0f} | "
                     + (f"{max(busy):.0%}" if busy else "-") + " |")
    lines += ["", "Unpinned afterwards, one burst at a time, wall ms per call (thread CPU ms per call, CPU): " +
              ", ".join(f"{b['ms']:.2f} ({b['thread_ms']:.2f}, CPU {b['cpu']})" for b in free)]
    lines += split_lines(free)
    publish("\n".join(lines), args.out, {"pinned": {str(c): r for c, r in runs.items()}, "unpinned": free})
    return 0


if __name__ == "__main__":
    sys.exit(main())
