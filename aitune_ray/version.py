"""The package's version, in a leaf module that imports nothing, so any layer may read it."""

__version__ = "0.1.0"
