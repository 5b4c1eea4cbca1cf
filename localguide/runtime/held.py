"""A process-wide setting held while any thread is inside a ``with`` block (``Held``).

The first thread in applies it and keeps what it replaced; the last one out puts that back, once,
whatever the order in which the threads leave (``gcpause.paused``, ``quiet.quiet_llama``).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable


class Held:
    """``apply()`` when the first thread enters, returning what it replaced; ``restore(that)``
    when the last one leaves."""

    def __init__(self, apply: Callable[[], Any], restore: Callable[[Any], None]):
        self._apply, self._restore = apply, restore
        self.lock = threading.Lock()
        self._depth = 0
        self.saved = None  # what ``apply`` replaced, while any thread is inside (under ``lock``)

    @contextmanager
    def __call__(self):
        with self.lock:
            if self._depth == 0:
                self.saved = self._apply()
            self._depth += 1
        try:
            yield
        finally:
            with self.lock:
                self._depth -= 1
                if self._depth == 0:
                    saved, self.saved = self.saved, None
                    self._restore(saved)
