"""A two-module pipeline (encoder, then head) held by a plain Python object; both modules are tuned."""
