"""Importing this module turns JIT tuning on: every nn.Module made afterwards is tracked and tuned once it has
been called (import it first). AUTOWRAPT_BOOTSTRAP=aitune_ray_enable_jit_tuning does the same with no change to
the program (pip install 'aitune-ray[jit]' for autowrapt)."""

from aitune_ray.jit.patcher import Patcher

Patcher.patch_torch()


def wrapt_auto_enable(_module) -> None:
    """autowrapt's entry point, called when torch is first imported."""
    import logging

    logging.getLogger(__name__).warning("aitune_ray: JIT tuning enabled")
    Patcher.patch_torch()
