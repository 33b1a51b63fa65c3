"""What this machine can run: versions, GPUs, and which backends and kernel providers work here.

machine_report() is plain data about the process it runs in (the driver, or a Ray task on each node: see
aitune_ray.cluster.doctor). It imports the optional libraries it checks (to see that they really load and,
for ONNX Runtime, which execution providers they offer), never a user's code. A node "can run" when it has
a working GPU and something runs on it, or has no GPU and something runs on its CPU.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import platform
import re
import shutil
import subprocess
from pathlib import Path

from aitune_ray.runtime.bytecode import advice, uncached

logger = logging.getLogger(__name__)

EXIT_OK, EXIT_CANNOT_RUN = 0, 1

#: Libraries checked: import name -> (distributions to read the version from, the extra that installs it).
LIBRARIES: dict[str, tuple[tuple[str, ...], str]] = {
    "ray": (("ray",), "ray"),
    "onnxruntime": (("onnxruntime-gpu", "onnxruntime"), "onnx"),
    "onnx": (("onnx",), "onnx"),
    "torchao": (("torchao",), "torchao"),
    "tensorrt": (("tensorrt", "tensorrt-cu12", "tensorrt-cu13"), "tensorrt"),
    "torch_tensorrt": (("torch-tensorrt", "torch_tensorrt"), "torch-tensorrt"),
    "modelopt": (("nvidia-modelopt",), "modelopt"),
    "sageattention": (("sageattention",), "sage"),
    "flash_attn.cute": (("flash-attn-4", "fa4"), ""),
    "flash_attn": (("flash-attn", "flash_attn"), ""),
}
#: Distribution names that the backends' library lists use, by the import name checked here.
IMPORT_NAMES = {"nvidia-modelopt": "modelopt", "torch-tensorrt": "torch_tensorrt", "onnxruntime-gpu": "onnxruntime"}
#: Backends that run on CUDA only (the rest run on CPU too).
GPU_ONLY = ("TensorRT", "TorchTensorRT")


def library_status(name: str) -> dict:
    """{"version": ..., "ok": bool, "error": ...} of one library, imported to see that it loads."""
    distributions, extra = LIBRARIES.get(name, ((name,), ""))
    version = None
    for dist in distributions:
        try:
            version = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        if importlib.util.find_spec(name.partition(".")[0]) is None:
            return {"version": version, "ok": False, "error": "not installed", "extra": extra}
        from aitune_ray.runtime.quiet import import_quietly

        module = import_quietly(name)
    except Exception as exc:  # noqa: BLE001 - a broken install raises anything
        return {"version": version, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:300], "extra": extra}
    version = version or getattr(module, "__version__", None)
    status = {"version": str(version) if version else "?", "ok": True, "error": "", "extra": extra}
    if name == "onnxruntime":
        status["providers"] = list(module.get_available_providers())
    return status


def gpus() -> tuple[list[dict], str]:
    """(this process's CUDA GPUs: name, memory, capability; the NVIDIA driver version or "")."""
    import torch

    found = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            found.append({"index": index, "name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                          "capability": f"{props.major}.{props.minor}"})
    return found, driver_version()


def driver_version() -> str:
    """The NVIDIA driver's version: from nvidia-smi, else the kernel module's /proc file, else ""."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=20, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out:
            return out.splitlines()[0].strip()
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return ""
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
    return match.group(1) if match else ""


def backend_classes() -> list[type]:
    from aitune_ray import backend as package
    from aitune_ray.backend.backend import Backend

    found = [getattr(package, name) for name in package.__all__]
    return [cls for cls in found if isinstance(cls, type) and issubclass(cls, Backend) and cls is not Backend]


def backend_libraries(cls: type) -> tuple[str, ...]:
    """The optional libraries a backend class needs, as import names (it declares them: Backend.libraries)."""
    return tuple(IMPORT_NAMES.get(lib, lib) for lib in (getattr(cls, "libraries", ()) or ()))


def backend_verdicts(libraries: dict[str, dict], cuda: bool) -> list[dict]:
    """For each built-in backend: can it run here, on what, and what to install if not."""
    verdicts = []
    for cls in backend_classes():
        name = cls.__name__
        needs = backend_libraries(cls)
        missing = [lib for lib in needs if not (libraries.get(lib) or library_status(lib))["ok"]]
        devices = [] if missing else (["cuda"] if cuda else []) + ([] if name.startswith(GPU_ONLY) else ["cpu"])
        if name.startswith("ONNXRuntime") and cuda and not missing:
            providers = libraries.get("onnxruntime", {}).get("providers", [])
            if "CUDAExecutionProvider" not in providers:
                devices = ["cpu"]
                missing = ["onnxruntime-gpu (CUDAExecutionProvider)"]
        extras = sorted({LIBRARIES.get(lib, ((), ""))[1] for lib in needs if lib in missing} - {""})
        if missing and name.startswith("ONNXRuntime") and cuda:
            extras = ["onnx-gpu"]
        if not cuda and name.startswith(GPU_ONLY):
            missing = missing + ["a CUDA GPU"]
        install = "pip install " + " ".join(f"'aitune-ray[{extra}]'" for extra in extras) if extras else ""
        verdicts.append({"name": name, "devices": devices, "missing": missing, "install": install})
    return verdicts


def provider_verdicts(libraries: dict[str, dict], cuda: bool) -> list[dict]:
    """For each kernel provider: can it run here. PyTorch's flash SDPA has a CPU kernel of its own
    (aten._scaled_dot_product_flash_attention_for_cpu, which TorchSDPAKernelProvider calls there); its cuDNN
    and efficient kernels and every library's attention need CUDA."""
    from aitune_ray.kernel_forge.kernel_provider.library_attention import LibraryAttentionProvider

    out = [{"name": "TorchSDPA (flash)", "devices": ["cuda", "cpu"] if cuda else ["cpu"], "missing": [], "install": ""},
           {"name": "TorchSDPA (cuDNN, efficient)", "devices": ["cuda"] if cuda else [],
            "missing": [] if cuda else ["a CUDA GPU"], "install": ""}]
    for cls in LibraryAttentionProvider.__subclasses__():
        lib = libraries.get(cls.module_name) or library_status(cls.module_name)
        devices = ["cuda"] if cuda and lib["ok"] else []
        missing = ([] if lib["ok"] else [cls.module_name]) + ([] if cuda else ["a CUDA GPU"])
        out.append({"name": cls.label, "devices": devices, "missing": missing,
                    "install": "" if lib["ok"] else cls.install})
    out.append({"name": "Inductor generator", "devices": ["cuda", "cpu"] if cuda else ["cpu"], "missing": [],
                "install": ""})
    return out


def machine_report(ray_gpus: float | None = None) -> dict:
    """This process's row: versions, GPUs, libraries, what can run, and whether anything can."""
    import torch

    libraries = {name: library_status(name) for name in LIBRARIES}
    cards, driver = gpus()
    cuda = bool(cards)
    physical = cuda or bool(driver)
    backends = backend_verdicts(libraries, cuda)
    providers = provider_verdicts(libraries, cuda)
    target = "cuda" if physical else "cpu"
    runnable = [b["name"] for b in backends if target in b["devices"]]
    notes = []
    if physical and not cuda:
        notes.append(f"an NVIDIA driver ({driver}) is present but torch sees no CUDA device "
                     f"(torch {torch.__version__} built for CUDA {torch.version.cuda or 'none'})")
    missing = uncached()
    if missing:
        notes.append(advice(missing))
    if ray_gpus and not cuda:
        notes.append(f"Ray advertises {ray_gpus:g} GPU(s) here but torch sees no CUDA device: tuning there runs "
                     "on the CPU")
    return {"node": platform.node(), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda or "", "cuda_available": cuda, "gpus": cards, "driver": driver,
            "ray_gpus": ray_gpus, "libraries": libraries, "backends": backends, "providers": providers,
            "target": target, "runnable": runnable, "can_run": bool(runnable), "uncached_bytecode": missing,
            "notes": notes}


# ----- the command ------------------------------------------------------------------------------------
SHORT = {"onnxruntime": "ort", "torch_tensorrt": "torch-trt", "tensorrt": "trt", "sageattention": "sage",
         "flash_attn.cute": "fa4", "flash_attn": "fa2"}


def render(rows: list[dict]) -> str:
    """One table row per node, then per node what can run there and what to install for the rest."""
    libs = [lib for lib in LIBRARIES if lib != "onnx"]
    head = ["node", "python", "torch", "CUDA", "GPUs", "driver"] + [SHORT.get(lib, lib) for lib in libs]
    table = []
    for row in rows:
        cards = ", ".join(f"{g['name']} {g['memory_gib']:g} GiB" for g in row["gpus"]) or "none"
        cells = [row["node"], row["python"], row["torch"], row["cuda"] or "-", cards, row["driver"] or "-"]
        for lib in libs:
            status = row["libraries"].get(lib, {})
            text = status.get("version") or "?" if status.get("ok") else "-"
            if lib == "onnxruntime" and status.get("ok"):
                text += " (" + ",".join(p.replace("ExecutionProvider", "") for p in status.get("providers", [])) + ")"
            cells.append(text)
        table.append(cells)
    widths = [max(len(str(r[i])) for r in [head] + table) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head] + table]
    for row in rows:
        lines.append("")
        lines.append(f"{row['node']}: tunes for {row['target']}; " + ("can run: " + ", ".join(row["runnable"])
                     if row["can_run"] else f"NOTHING can run on {row['target']} here"))
        for kind in ("backends", "providers"):
            for item in row[kind]:
                if row["target"] not in item["devices"]:
                    fix = f"; install: {item['install']}" if item["install"] else ""
                    lines.append(f"  {item['name']}: not on {row['target']} (needs {', '.join(item['missing']) or 'cpu'})"
                                 f"{fix}")
        lines += [f"  note: {note}" for note in row["notes"]]
    return "\n".join(lines)


def exit_code(rows: list[dict]) -> int:
    """0 when every node can run something (on its GPU, or on its CPU where it has none), else 1."""
    return EXIT_OK if rows and all(r.get("can_run") for r in rows) else EXIT_CANNOT_RUN
