"""What decode lengths cost on this machine, kept from one run to the next.

A ``DecodeCost`` learns what a decode of n tokens costs against one by timing them, and tries a
length it has not timed at a guess. Where batches are dear (llama.cpp's reference kernels on a
CPU), each length's first try is a loss, and a process that generates once (``localguide run``)
has few decodes to win it back: one-shot runs of SmolLM2's grammars paid 6-15% for them. So the
lengths a run has timed are written to the cache directory (per model file, threads, kernels,
CPU and llama-cpp-python), and the next run starts from them (``DecodeCost.start_from``): a
guess within the cap of a length timed too few times, replaced by this run's own timings as they
come, never a judge of what drafting gains. A cost timed more than ``FRESH`` seconds ago is taken
within the cap of a length timed too few times (``DecodeCost.cap``): one kept from a busy moment
then no longer keeps its length from being tried. A write waits ``SAVE_EVERY`` seconds after the
last, so a short process's last moves may go unwritten: the next run times them again.
"""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

import numpy as np

from ..runtime import cache
from .drafts import DecodeCost

FORMAT = "2"
FRESH = 86400.0  # seconds a kept cost is taken as it is
SAVE_EVERY = 10.0  # seconds between two writes at least (a server generates many times a second)
CHANGED_BY = 0.1  # a length's cost moved by more than this share since the last write: write again
MIN_RATIO, MAX_RATIO = 0.05, 1000.0  # (T(n) / T(1) outside these is no timing of a sane machine)
_warned: set[Path] = set()


def host_cpu() -> str:
    """The CPU's name as LLVM knows it (``znver3``, ``skylake-avx512``; numba's cache is keyed by it too)."""
    try:
        from llvmlite import binding

        return binding.get_host_cpu_name()
    except Exception:  # (no llvmlite: the file is keyed by the CPU count and threads alone)
        return ""


class KeptCosts:
    """The file of one model's decode costs on this machine and threads (``path``)."""

    def __init__(self, path: Path):
        self.path = path
        self._written: dict[int, tuple[float, float]] = {}  # n -> (T(n) / T(1), when it was timed)
        self._at = 0.0  # time.monotonic() of the last write (0: none)
        self._lock = threading.Lock()

    def load_into(self, cost: DecodeCost) -> bool:
        """Start ``cost`` from the file's lengths; False where there is no sound file (a damaged
        one is timed afresh, and written over)."""
        try:
            arrays = cache.read(self.path)
        except FileNotFoundError:
            return False
        except (OSError, ValueError, EOFError, KeyError, IndexError, TypeError) as e:
            return self._damaged(f"{type(e).__name__}: {e}")
        try:
            lengths, ratios, when = arrays["lengths"], arrays["ratios"], arrays["when"]
            now = time.time()
            ok = (int(arrays["format"][0]) == int(FORMAT) and lengths.ndim == ratios.ndim == when.ndim == 1
                  and lengths.dtype.kind in "iu" and ratios.dtype.kind == when.dtype.kind == "f"
                  and len(lengths) == len(ratios) == len(when)
                  and (lengths > 1).all() and len(np.unique(lengths)) == len(lengths)
                  and np.isfinite(ratios).all() and (ratios >= MIN_RATIO).all() and (ratios <= MAX_RATIO).all()
                  and np.isfinite(when).all() and (when <= now + FRESH).all())
        except (KeyError, IndexError, ValueError, TypeError):
            ok = False
        if not ok:
            return self._damaged("unexpected content")
        kept = {int(n): (float(r), float(t)) for n, r, t in zip(lengths.tolist(), ratios.tolist(), when.tolist())}
        cost.start_from({n: r if now - t <= FRESH else min(r, 1.0 + cost.cap * (n - 1))
                         for n, (r, t) in kept.items()})
        self._written = kept
        return True

    def _damaged(self, why: str) -> bool:
        """A file that is not one of ours as written: timed afresh, and written over (one warning)."""
        if self.path not in _warned:
            _warned.add(self.path)
            warnings.warn(f"localguide: ignoring the damaged decode-cost file {self.path} ({why}); "
                          "the decode lengths are timed afresh", RuntimeWarning, stacklevel=3)
        return False

    def save_from(self, cost: DecodeCost) -> bool:
        """Write what ``cost`` has learned, where it adds a length or moved one by more than
        ``CHANGED_BY`` since the last write, and ``SAVE_EVERY`` seconds have passed; whether it wrote."""
        learned = cost.learned()
        if not learned:
            return False
        with self._lock:
            now = time.monotonic()
            if self._at and now - self._at < SAVE_EVERY:
                return False
            old = self._written
            if all(n in old and abs(r - old[n][0]) <= CHANGED_BY * old[n][0] for n, r in learned.items()):
                return False
            wall = time.time()
            # (a length not timed in this run keeps its earlier cost, and when it was timed)
            merged = {**old, **{n: (r, wall) for n, r in learned.items()}}
            lengths = sorted(merged)
            cache.save(self.path, {"format": np.array([int(FORMAT)], np.int32),
                                   "lengths": np.array(lengths, np.int32),
                                   "ratios": np.array([merged[n][0] for n in lengths], np.float64),
                                   "when": np.array([merged[n][1] for n in lengths], np.float64)})
            self._written, self._at = merged, now
            return True
