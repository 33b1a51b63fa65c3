"""KernelSelectorBackend: choose kernels per torch.nn.functional function, then build a delegate backend.

At build, a KernelOptimizer profiles the module on the recorded samples and picks a provider per
function (possibly none: an empty plan, and the delegate builds the unchanged module). The delegate
then builds a wrapper of the module inside which the plan is active:

- JIT delegate (Inductor JIT, eager, ...): the plan stays active around inference; a checkpoint
  stores the plan and the delegate's state, and restoring rebuilds from the stored plan without
  profiling again.
- AOT delegate (Inductor AOT, ...): the replacement kernels are captured into the delegate's
  artifact; a checkpoint stores that artifact only, and this backend is then ahead-of-time too.

A spec may carry a finished plan (``spec_with_plan``): the build then uses it and does not profile.
That is how an executor that makes the plan elsewhere (the Ray executor, with its providers
benchmarked on several GPUs) hands it to the actor that builds the composite.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from torch import nn
from torch.nn.attention import SDPBackend

from aitune_ray.backend.backend import SAFE, Backend, BackendConfig, Planner, class_path, import_class
from aitune_ray.backend.torch_inductor_jit import TorchInductorJitBackend
from aitune_ray.decision.rule import Rule
from aitune_ray.decision.session import CONFIRM_ROUNDS
from aitune_ray.errors import BuildError, CheckpointError, ConfigError
from aitune_ray.kernel_forge.kernel_provider import (
    FlashAttention4KernelProvider, KernelGenerator, KernelProvider, TorchSDPAKernelProvider,
    kernel_generator_from_dict, kernel_provider_from_dict)
from aitune_ray.kernel_forge.optimizer import DEFAULT_GENERATION_TIMEOUT, KernelOptimizer, check_percent
from aitune_ray.kernel_forge.plan import KernelOptimizationPlan
from aitune_ray.measure.timing import MeasureConfig
from aitune_ray.model.samples import SampleStore

logger = logging.getLogger(__name__)

STATE_VERSION = 1
PLAN_KEY = "kernel_plan"
RULE_KEY = "rule"    # the strategy's accept rule (Rule.settings()), which the kernel forge's choice follows


def default_kernel_providers() -> list[KernelProvider]:
    """PyTorch flash, PyTorch cuDNN and FlashAttention-4 attention."""
    return [TorchSDPAKernelProvider(SDPBackend.FLASH_ATTENTION), TorchSDPAKernelProvider(SDPBackend.CUDNN_ATTENTION),
            FlashAttention4KernelProvider()]


def _sources(value: Any, kind: type, from_dict, what: str) -> list:
    if value is None:
        return []
    items = [value] if isinstance(value, (kind, dict)) else list(value)
    out = []
    for item in items:
        if isinstance(item, dict):
            item = from_dict(item)
        if not isinstance(item, kind):
            raise ConfigError(f"{what} must be {kind.__name__} objects or their to_dict(), not {type(item).__name__}")
        out.append(item)
    return out


@dataclasses.dataclass
class KernelSelectorBackendConfig(BackendConfig):
    """Kernel sources and selection rules (KernelOptimizer's arguments).

    kernel_providers / kernel_generators: objects, or their to_dict() (as from_dict passes them).
    tolerance: one relative L2 bound for every candidate (None: each provider's own by dtype).
    measure: MeasureConfig.to_dict() for timing candidates (None: the kernel default).
    """

    # providers and generators: classes known to the registry only (their own fields name functions and modes)
    safe_fields = {name: SAFE for name in ("kernel_providers", "kernel_generators", "provider_min_time_share_percent",
                                           "generator_min_time_share_percent", "generation_timeout", "tolerance",
                                           "measure", "final_rounds")}

    kernel_providers: Any = dataclasses.field(default_factory=default_kernel_providers)
    kernel_generators: Any = None
    provider_min_time_share_percent: float = 0.0
    generator_min_time_share_percent: float = 10.0
    generation_timeout: float = DEFAULT_GENERATION_TIMEOUT
    tolerance: float | None = None
    measure: dict | None = None
    final_rounds: int = CONFIRM_ROUNDS

    def __post_init__(self) -> None:
        self.kernel_providers = _sources(self.kernel_providers, KernelProvider, kernel_provider_from_dict,
                                         "kernel_providers")
        self.kernel_generators = _sources(self.kernel_generators, KernelGenerator, kernel_generator_from_dict,
                                          "kernel_generators")
        if not self.kernel_providers and not self.kernel_generators:
            raise ConfigError("KernelSelectorBackendConfig needs at least one kernel provider or generator")
        check_percent(self.provider_min_time_share_percent, "provider_min_time_share_percent")
        check_percent(self.generator_min_time_share_percent, "generator_min_time_share_percent")
        if self.generation_timeout < 0:
            raise ConfigError("generation_timeout must be at least 0")
        if int(self.final_rounds) < 0:
            raise ConfigError(f"final_rounds must not be negative, got {self.final_rounds}")
        if isinstance(self.measure, MeasureConfig):
            self.measure = self.measure.to_dict()

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["kernel_providers"] = [p.to_dict() for p in self.kernel_providers]
        data["kernel_generators"] = [g.to_dict() for g in self.kernel_generators]
        return data

    def describe(self) -> str:
        parts = [f"providers=[{', '.join(p.name for p in self.kernel_providers)}]"]
        if self.kernel_generators:
            parts.append(f"generators=[{', '.join(g.name for g in self.kernel_generators)}]")
        return ",".join(parts)

    def optimizer(self, **extra: Any) -> KernelOptimizer:
        """A KernelOptimizer with these settings (extra: its other arguments, e.g. runner=)."""
        return KernelOptimizer(
            self.kernel_providers, self.kernel_generators, self.provider_min_time_share_percent,
            self.generator_min_time_share_percent, self.generation_timeout, tolerance=self.tolerance,
            measure=MeasureConfig.from_dict(self.measure) if self.measure else None, final_rounds=self.final_rounds,
            **extra)


class KernelSelectorBackend(Backend):
    """Kernel selection (KernelOptimizer) in front of a delegate backend (default TorchInductorJitBackend)."""

    config_class = KernelSelectorBackendConfig
    build_cost = 2.0    # profiling and provider benchmarks, then the delegate's build

    def __init__(self, config: KernelSelectorBackendConfig | None = None, delegate_backend: Backend | None = None):
        super().__init__(config)
        delegate = delegate_backend if delegate_backend is not None else TorchInductorJitBackend()
        if not isinstance(delegate, Backend):
            raise ConfigError(f"delegate_backend must be a Backend, not {type(delegate).__name__}")
        self.delegate = delegate
        self.plan = KernelOptimizationPlan()
        #: A plan made before the build (carried by the spec): the build uses it instead of profiling.
        self.preset_plan: KernelOptimizationPlan | None = None
        #: The accept rule the kernel choice follows (the strategy's, carried by the spec: with_rule).
        self.rule = Rule()
        self._restoring: tuple[dict, Path] | None = None

    # ----- decided by the delegate --------------------------------------------------------------
    @property
    def is_jit(self) -> bool:  # type: ignore[override]
        return self.delegate.is_jit

    @property
    def default_tolerance(self) -> float | None:  # type: ignore[override]
        return self.delegate.default_tolerance

    # ----- identity ------------------------------------------------------------------------------
    def key(self) -> str:
        both = f"{self.config.key()}/{self.delegate.key()}"
        return f"{self.name}-{hashlib.sha256(both.encode()).hexdigest()[:12]}"

    def describe(self) -> str:
        return f"{self.name}({self.config.describe()};delegate={self.delegate.describe()})"

    def spec(self) -> dict:
        spec = {"type": class_path(type(self)), "config": self.config.to_dict(), "delegate": self.delegate.spec()}
        if self.preset_plan is not None:
            spec[PLAN_KEY] = self.preset_plan.to_dict()
        if self.rule != Rule():
            spec[RULE_KEY] = self.rule.settings()
        return spec

    @classmethod
    def _from_spec(cls, spec: dict) -> "KernelSelectorBackend":
        config = cls.config_class.from_dict(dict(spec.get("config") or {}))
        delegate = Backend.from_spec(spec["delegate"]) if spec.get("delegate") else None
        backend = cls(config, delegate)
        if spec.get(PLAN_KEY) is not None:
            backend.preset_plan = KernelOptimizationPlan.from_dict(spec[PLAN_KEY])
        backend.rule = Rule.from_settings(spec.get(RULE_KEY))
        return backend

    @staticmethod
    def needs_plan(spec: dict) -> bool:
        """Whether spec is a KernelSelectorBackend's (or a subclass's) that carries no finished plan."""
        try:
            cls = import_class(str(spec.get("type", "")), Backend)
        except ConfigError:
            return False
        return issubclass(cls, KernelSelectorBackend) and spec.get(PLAN_KEY) is None

    @classmethod
    def plan_key(cls, spec: dict) -> str | None:
        """For a spec that needs a plan: its class and kernel-selection config, which alone decide the plan
        (the delegate does not), so candidates with one key can share one plan. None for any other spec."""
        if not KernelSelectorBackend.needs_plan(spec):
            return None
        return json.dumps([spec.get("type"), spec.get("config"), spec.get(RULE_KEY)], sort_keys=True, default=str)

    @classmethod
    def planner(cls, spec: dict, runner: Any) -> Planner:
        """Profiles the module and searches kernels with spec's KernelOptimizer, its tasks run by runner."""
        config = cls.config_class.from_dict(dict(spec.get("config") or {}))
        return _KernelPlanner(config.optimizer(runner=runner, rule=Rule.from_settings(spec.get(RULE_KEY))))

    @classmethod
    def with_rule(cls, spec: dict, rule: Rule) -> dict:
        """spec, carrying the strategy's accept rule: the kernel forge's confirm session is judged by it."""
        return {**spec, RULE_KEY: rule.settings()}

    @classmethod
    def spec_with_plan(cls, spec: dict, plan: KernelOptimizationPlan) -> dict:
        """spec, carrying plan: a build from it uses the plan without profiling."""
        return {**spec, PLAN_KEY: plan.to_dict()}

    # ----- build ---------------------------------------------------------------------------------
    def _build(self, module: nn.Module, samples: SampleStore, device, workdir: Path) -> None:
        if self._restoring is not None:  # Backend.restore of a JIT delegate: no samples, the stored plan
            state, _ = self._restoring
            self.plan = KernelOptimizationPlan.from_dict(state.get("kernel_plan") or {})
            logger.info("restoring %s with kernel plan: %s", self.delegate.name, self.plan.describe())
            self.delegate.check_kernel_plan(self.plan)
            self.delegate.restore(self.plan.wrap(module), state.get("delegate_state") or {}, {}, device,
                                  Path(workdir) / "delegate")
            return
        if self.preset_plan is not None:
            self.plan = self.preset_plan
            logger.info("%s: using the kernel plan made before the build", self.name)
        elif len(samples):
            self.plan = self.config.optimizer(rule=self.rule).make_plan(module, samples, module=module)
        else:
            logger.warning("%s: no recorded samples to profile, so no kernel is replaced", self.name)
            self.plan = KernelOptimizationPlan()
        logger.info("kernel plan: %s; building %s", self.plan.describe(), self.delegate.describe())
        self.delegate.check_kernel_plan(self.plan)
        self.delegate.build(self.plan.wrap(module), samples, device, Path(workdir) / "delegate")

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        # Already under infer()'s no_grad, and the delegate is active whenever this backend is.
        return self.delegate._infer(*args, **kwargs)

    def _activate(self) -> None:
        self.delegate.activate()

    def _deactivate(self) -> None:
        self.delegate.deactivate()

    # ----- checkpoint ----------------------------------------------------------------------------
    def _state(self) -> dict:
        state = {"version": STATE_VERSION, "delegate_state": self.delegate._state(),
                 "plan_summary": ("empty kernel plan: no function replaced, this is the delegate alone"
                                  if self.plan.is_empty else f"kernel plan: {self.plan.describe()}")}
        if self.is_jit:
            state["kernel_plan"] = self.plan.to_dict()
        else:  # captured in the artifact; named here for reports only
            state["captured_kernels"] = self.plan.functions
        return state

    def _artifacts(self) -> dict[str, Path]:
        return self.delegate._artifacts()

    def restore(self, module: nn.Module, state: dict, artifacts: dict[str, Path], device,
                workdir: Path) -> "KernelSelectorBackend":
        state = dict(state or {})
        if state.get("version", STATE_VERSION) > STATE_VERSION:
            raise CheckpointError(f"{self.name} state version {state['version']} is newer than this aitune-ray")
        if self.is_jit and "kernel_plan" not in state:
            raise CheckpointError(f"{self.name} with a JIT delegate needs a kernel_plan in its state")
        self._restoring = (state, Path(workdir))
        try:
            return super().restore(module, state, artifacts, device, workdir)
        finally:
            self._restoring = None

    def _load(self, module: nn.Module, state: dict, artifacts: dict[str, Path], device) -> None:
        if self._restoring is None:
            raise BuildError(f"{self.name}._load is reached through restore()")
        workdir = self._restoring[1]
        self.plan = KernelOptimizationPlan()  # the kernels live in the delegate's artifact
        self.delegate.restore(module, state.get("delegate_state") or {}, artifacts, device, workdir / "delegate")


class _KernelPlanner(Planner):
    """A KernelSelectorBackend's plan: KernelOptimizer.profile_functions, then its search."""

    def __init__(self, optimizer: KernelOptimizer):
        self.optimizer = optimizer
        self._profiled = None

    def profile(self, module: nn.Module, samples: SampleStore) -> None:
        if len(samples):
            self._profiled = self.optimizer.profile_functions(module, samples, module=module)
        else:
            logger.warning("no recorded samples to profile, so no kernel is replaced")

    def search(self) -> KernelOptimizationPlan:
        return self.optimizer.search(self._profiled) if self._profiled is not None else KernelOptimizationPlan()

    def cancel(self) -> None:
        self.optimizer.cancel()
