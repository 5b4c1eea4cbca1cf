"""The Index (allowed tokens per automaton state, built ahead of time) and its cursors.

``Index`` is immutable and shared between threads; ``Guide`` is a cheap cursor over it;
``LazyIndex`` answers state by state while the whole Index is built in the background.
"""

from .guide import Guide
from .index import Index

__all__ = ["Guide", "Index"]
