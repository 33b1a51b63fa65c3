"""AITune's aitune.torch.jit (tuning while inference runs) has no counterpart here: importing it fails,
saying what to write instead (aitune_ray.api.absent)."""

from aitune_ray.api.absent import AHEAD_OF_TIME
from aitune_ray.errors import ConfigError

raise ImportError(f"AITune's aitune.torch.jit has no counterpart in aitune_ray: {AHEAD_OF_TIME}") from ConfigError(
    AHEAD_OF_TIME)
