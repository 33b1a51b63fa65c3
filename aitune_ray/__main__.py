"""python -m aitune_ray: the aitune-ray command."""

import sys

from aitune_ray.cli import main

sys.exit(main())
