"""The library version, in a module of its own so that ``cache`` can key files by it without an upward import."""

__version__ = "0.1.0"
