"""The package's version, in a module of its own so that any layer can read it (a
checkpoint records it) without importing the package's public face."""

__version__ = "0.1.0"
