"""Test doubles for deterministic tests of tunings, strategies and executors (no Ray import here).

- sim: a simulated clock and a module and backends of known, noisy speed that "sleep" on it, with a registry
  of the simulated buffers they hold (for memory tests that count bytes, not RSS).
- sessions: simulated screening and confirm-session numbers, for operating characteristics of the decision
  procedure over hundreds of tunings in seconds: backends (simulate_tunings) and the kernel forge's choice
  (simulate_kernel_tunings, through KernelOptimizer with its own default rounds).

Use ``with aitune_ray.measure.timing.use_clock(SIM_CLOCK): ...`` so that timings read the simulated clock; the
inline executor's contained builds (child processes) read it too (aitune_ray.executors.build_process sends the clock in
use); Ray's actors read their own real clock.
"""

from aitune_ray.testing.sim import (LIVE_BUFFERS, SIM_CALLS, SIM_CLOCK, SimAffine, SimBackend, SimClock, SimConfig,
                                    reset, sim)
from aitune_ray.testing.sessions import SimCandidate, simulated_screen, simulated_session

__all__ = ["LIVE_BUFFERS", "SIM_CALLS", "SIM_CLOCK", "SimAffine", "SimBackend", "SimClock", "SimConfig", "reset",
           "sim", "SimCandidate", "simulated_screen", "simulated_session"]
