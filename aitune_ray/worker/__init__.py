"""The Ray-free worker core every executor runs (core, candidate) and the seam strategies use (seam)."""
