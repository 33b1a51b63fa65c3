"""A process's setup: devices, temporary folders, quiet warnings, warm-up, bytecode, compile frames."""
