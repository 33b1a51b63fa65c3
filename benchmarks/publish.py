"""Kept for ray_vs_inline.py's import only: the benchmarks' shared tooling (publish, record_of, fresh_caches) is
in results_table.py. Remove this file once ray_vs_inline.py imports fresh_caches from there."""

from results_table import fresh_caches  # noqa: F401
