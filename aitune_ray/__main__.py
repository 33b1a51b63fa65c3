"""python -m aitune_ray: the aitune-ray command."""

import sys

from aitune_ray.command.cli import main

sys.exit(main())
