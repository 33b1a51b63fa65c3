"""What a checkpoint holds, read from its manifest, every part's SHA-256 verified: nothing is loaded.

inspect_checkpoint(path) reads the manifest (after checking its own hash and format version) and streams
every part through SHA-256, and returns a plain summary: modules, backend type and config, JIT or AOT,
kernel plan, signature, tuning device, versions, and each part's size and hash verdict. It never builds
a model, never unpickles and never imports a module the checkpoint names: backend and provider types are
shown as the strings they are stored as.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from aitune_ray.checkpoint import format as fmt
from aitune_ray.checkpoint.reader import CheckpointArchive
from aitune_ray.errors import AITuneRayError, CheckpointError
from aitune_ray.records.imports import short_name
from aitune_ray.runtime import tempdirs
from aitune_ray.runtime.printable import printable_tree

EXIT_OK, EXIT_BAD = 0, 1


def inspect_checkpoint(path: str | Path) -> dict:
    """The summary of a checkpoint. Raises CheckpointError (or a subclass) when it is unreadable, its
    manifest is changed or from a newer format, or any part does not match its recorded SHA-256; whatever
    else reading it raises (a library's error, MemoryError) reaches the caller as a CheckpointError too."""
    path = Path(path)
    try:
        return _inspect(path)
    except AITuneRayError:
        raise
    except Exception as exc:  # noqa: BLE001 - the one promise: a checkpoint that cannot be read is a CheckpointError
        raise CheckpointError(f"{path} cannot be read: {type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:300]}") from exc


def _inspect(path: Path) -> dict:
    with CheckpointArchive(path) as archive, tempdirs.folder("inspect") as scratch:
        manifest = archive.manifest()
        modules = []
        for entry in manifest["modules"]:
            parts = {"weights": entry["weights"], **{f"artifact {n}": p for n, p in entry["artifacts"].items()}}
            checked = {}
            for name, part in parts.items():
                target = Path(scratch) / "part"
                archive.extract(part, target)    # verifies the SHA-256; raises on a mismatch
                checked[name] = {"member": part["member"], "size": target.stat().st_size,
                                 "sha256": part["sha256"], "verified": True}
                target.unlink()
            modules.append(_module_summary(entry, checked))
    return {"path": str(path), "size": path.stat().st_size, "format": manifest.get("format"),
            "format_version": manifest.get("format_version"), "created": manifest.get("created"),
            "versions": manifest.get("versions") or {}, "modules": modules,
            "parts_verified": sum(len(m["parts"]) for m in modules) + 1}   # + the manifest


def _module_summary(entry: dict, parts: dict) -> dict:
    backend = entry["backend"]
    summary: dict[str, Any] = {"path": entry["path"], "name": entry["name"], "device": entry["device"],
                               "failure": entry.get("failure") or "", "signature": entry.get("signature") or {},
                               "gpu_kind": entry.get("gpu_kind") or "", "parts": parts}
    if backend == fmt.EAGER:
        summary.update(backend="eager", backend_type="", config={}, is_jit=None, kernel_plan=None)
    else:
        state = entry.get("state") or {}
        plan = state.get("kernel_plan") or backend.get("kernel_plan")
        summary.update(backend=short_name(backend["type"]), backend_type=str(backend["type"]),
                       config=backend.get("config") or {}, is_jit=entry.get("is_jit"),
                       kernel_plan=_plan_summary(plan, entry["path"]) if isinstance(plan, dict) else None)
    return summary


def _plan_summary(plan: dict, module: str) -> dict:
    """Function -> the chosen provider, from the plan's records (strings only: nothing is resolved). A plan
    whose records are not lists of mappings is a CheckpointError."""
    results, providers = plan.get("results") or [], plan.get("providers") or []
    for key, value in (("results", results), ("providers", providers)):
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise CheckpointError(f"module {fmt.shown(module)}: kernel_plan.{key} is not a list of mappings "
                                  f"({fmt.shown(value, 60)})")
    chosen = {str(r.get("function")): str(r.get("description") or r.get("source") or "?")
              for r in results if r.get("selected")}
    return {"chosen": chosen, "providers": [str(p.get("type", "?")) for p in providers],
            "candidates_tried": len(results)}


def render(summary: dict) -> str:
    """The summary as the lines the command prints. Every string of the file is shown printable: a name with
    control characters cannot rewrite the line it is on, nor add one."""
    summary = printable_tree(summary)
    lines = [f"checkpoint {summary['path']}: {summary['size']:,} bytes, {summary['format']} version "
             f"{summary['format_version']}, created {summary['created']}",
             "versions: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["versions"].items()))]
    for module in summary["modules"]:
        where = repr(module["path"]) if module["path"] else "(the whole model)"
        kind = "" if module["is_jit"] is None else (" (JIT: rebuilt at load)" if module["is_jit"] else
                                                   " (AOT: artifact loaded)")
        on = module["device"] + (f" ({module['gpu_kind']})" if module.get("gpu_kind") else "")
        lines.append(f"module {where} named {module['name']!r}, tuned on {on}: "
                     f"{module['backend']}{kind}")
        if module["backend_type"]:
            lines.append(f"  backend type: {module['backend_type']}")
        config = {k: v for k, v in module["config"].items() if v not in (None, {}, [])}
        if config:
            lines.append("  config: " + json.dumps(config, sort_keys=True, default=str)[:600])
        if module["kernel_plan"] is not None:
            chosen = module["kernel_plan"]["chosen"]
            text = ", ".join(f"{f} -> {p}" for f, p in chosen.items()) or ", ".join(module["kernel_plan"]["providers"])
            lines.append("  kernel plan: " + (text or "no replacement")
                         + f" ({module['kernel_plan']['candidates_tried']} candidates tried)")
        if module["failure"]:
            lines.append(f"  stayed eager: {module['failure']}")
        if module["signature"]:
            lines.append("  signature: " + json.dumps(module["signature"], sort_keys=True, default=str)[:600])
        for name, part in module["parts"].items():
            lines.append(f"  {name}: {part['member']}, {part['size']:,} bytes, sha256 {part['sha256'][:16]}... ok")
    lines.append(f"hashes: all {summary['parts_verified']} parts verified (manifest included)")
    return "\n".join(lines)


def inspect_command(args, say: Callable[..., None]) -> int:
    try:
        summary = inspect_checkpoint(args.checkpoint)
        text = json.dumps(summary, indent=2, sort_keys=True, default=str) if args.json else render(summary)
    except CheckpointError as exc:
        say(f"error: {type(exc).__name__}: {exc}", error=True)
        return EXIT_BAD
    except Exception as exc:  # noqa: BLE001 - a field of a type no check foresaw: one line, never a traceback
        say(f"error: CheckpointError: {args.checkpoint} cannot be shown: {type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:300]}", error=True)
        return EXIT_BAD
    say(text)
    return EXIT_OK
