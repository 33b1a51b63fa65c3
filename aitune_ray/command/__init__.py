"""The aitune-ray command: its CLI, the job file's schema, progress view and log lines."""
