"""BatchDispatchBackend: each call goes, by its batch size, to the backend that won at that size.

routes maps recorded batch sizes to member keys (None: eager at that size); members maps member keys to
their specs. A call's batch size picks the nearest recorded size at or above it; a size above every
recorded one goes to the largest. A checkpoint holds the members' states and artifacts (artifact names
prefixed by the member's position), so the whole dispatch saves and loads as one backend.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_ray.backend.backend import SAFE, Backend, BackendConfig, BackendState
from aitune_ray.errors import CheckpointError, ConfigError
from aitune_ray.model.samples import SampleStore, batch_size_of


@dataclasses.dataclass
class BatchDispatchConfig(BackendConfig):
    """routes: {batch size: member key or None (eager)}; members: {member key: Backend.spec()}."""

    # members: specs of backends, each checked by its own config's rule (checkpoint/artifact_check.parts_of)
    safe_fields = {"routes": SAFE, "members": SAFE}

    routes: dict = dataclasses.field(default_factory=dict)
    members: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.routes = {int(bs): key for bs, key in self.routes.items()}
        missing = sorted({k for k in self.routes.values() if k is not None} - set(self.members))
        if missing:
            raise ConfigError(f"BatchDispatchConfig routes to members it does not list: {missing}")

    def key(self) -> str:
        text = json.dumps({"routes": {str(bs): k for bs, k in sorted(self.routes.items())},
                           "members": sorted(self.members)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


class BatchDispatchBackend(Backend):
    config_class = BatchDispatchConfig
    is_jit = False   # its checkpoint entry holds its members' states and artifacts, whatever they are

    @classmethod
    def assemble(cls, module: nn.Module, members: dict[str, Backend], routes: dict[int, str | None],
                 device: torch.device) -> "BatchDispatchBackend":
        """A dispatch over members already built (and active or restorable), for module on device."""
        config = BatchDispatchConfig(routes=dict(routes), members={k: b.spec() for k, b in members.items()})
        backend = cls(config)
        backend._members, backend._module, backend.device = dict(members), module, torch.device(device)
        for member in members.values():
            member.activate()
        backend.state = BackendState.ACTIVE
        return backend

    def describe(self) -> str:
        routes = ", ".join(f"bs {bs}: {self._label(key)}" for bs, key in sorted(self.config.routes.items()))
        return f"{self.name}({routes})"

    def _label(self, key: str | None) -> str:
        if key is None:
            return "eager"
        member = getattr(self, "_members", {}).get(key)
        return member.describe() if member is not None else key

    @property
    def members(self) -> dict[str, Backend]:
        """The built backends it routes to, by key (empty before it is built or restored)."""
        return dict(getattr(self, "_members", {}))

    # ----- routing ---------------------------------------------------------------------------------
    @functools.cached_property
    def _sizes(self) -> list[int]:
        """The recorded sizes in order: the routes never change once configured, so sorted once."""
        return sorted(self.config.routes)

    def route(self, batch_size: int) -> str | None:
        """The member key serving calls of this batch size (None: eager)."""
        at = bisect.bisect_left(self._sizes, batch_size)
        return self.config.routes[self._sizes[min(at, len(self._sizes) - 1)]]

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        key = self.route(batch_size_of(args, kwargs))
        if key is None:
            return self._module(*args, **kwargs)
        return self._members[key].infer(*args, **kwargs)

    # ----- lifecycle -------------------------------------------------------------------------------
    def _build(self, module: nn.Module, samples: SampleStore, device: torch.device, workdir: Path) -> None:
        self._module = module
        self._members = {}
        for index, (key, spec) in enumerate(sorted(self.config.members.items())):
            self._members[key] = Backend.from_spec(spec).build(module, samples, device, workdir / f"m{index}")

    def _activate(self) -> None:
        for member in self._members.values():
            member.activate()

    def _deactivate(self) -> None:
        for member in self._members.values():
            member.deactivate()

    def deploy(self) -> None:
        for member in self._members.values():
            member.deploy()
        super().deploy()

    # ----- checkpoint ------------------------------------------------------------------------------
    def export(self) -> tuple[dict, dict[str, Path]]:
        states, files = {}, {}
        for index, key in enumerate(sorted(self._members)):
            state, artifacts = self._members[key].export()
            states[key] = state
            files.update({f"m{index}-{name}": path for name, path in artifacts.items()})
        return {"members": states}, files

    def restore(self, module: nn.Module, state: dict, artifacts: dict[str, Path], device: torch.device,
                workdir: Path) -> "BatchDispatchBackend":
        self.device = torch.device(device)
        self._module = module
        self._members = {}
        states = (state or {}).get("members") or {}
        for index, (key, spec) in enumerate(sorted(self.config.members.items())):
            if key not in states:
                raise CheckpointError(f"{self.name}: no state for member {key}")
            prefix = f"m{index}-"
            mine = {name[len(prefix):]: path for name, path in artifacts.items() if name.startswith(prefix)}
            member = Backend.from_spec(spec)
            member.restore(module, states[key], mine, device, Path(workdir) / f"m{index}")
            self._members[key] = member
        self.state = BackendState.CHECKPOINT_LOADED
        return self
