"""Tune strategies: OneBackend, FirstWins, MaxThroughput, MinLatency and LatencyBudget."""

from aitune_ray.tune_strategy.first_wins_strategy import FirstWinsStrategy
from aitune_ray.tune_strategy.latency_budget_strategy import LatencyBudgetStrategy
from aitune_ray.tune_strategy.max_throughput_strategy import MaxThroughputStrategy
from aitune_ray.tune_strategy.min_latency_strategy import MinLatencyStrategy
from aitune_ray.tune_strategy.one_backend_strategy import OneBackendStrategy
from aitune_ray.report.model import ModuleReport, TuningReport
from aitune_ray.tune_strategy.tune_strategy import TuneStrategy
from aitune_ray.tune_strategy.validation_mode import PerformanceValidationMode

__all__ = ["FirstWinsStrategy", "LatencyBudgetStrategy", "MaxThroughputStrategy", "MinLatencyStrategy",
           "OneBackendStrategy", "PerformanceValidationMode",
           "TuneStrategy",
           "ModuleReport", "TuningReport"]
