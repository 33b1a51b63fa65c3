"""Executors besides Ray's (cluster/): inline, its build process, run journal, choice, doctor."""
