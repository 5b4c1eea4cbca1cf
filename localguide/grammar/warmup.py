"""The grammar kernels, compiled in a background process while a first use goes on without them.

Compiling the grammar kernels takes about a minute on a laptop; numba's disk cache makes it a
once-per-install cost. Until they are compiled, a process does not wait for them: the scanner
comes from its twin (``lexer_kernels.py_scanner_closure``), the subterminal trees and the
unions of groups from numpy (``trees_numpy``), the masks from ``MaskEngine``'s Python walks,
all giving what the kernels give. ``start`` launches one detached process per kernel folder
(``warmup.main``) that compiles every grammar kernel on a small grammar
and writes a marker; ``ready`` turns true once the marker is there, and from the next mask on
the process loads the kernels (milliseconds) and takes them.

The warm-up compiles in two parts at once where the machine has the cores: the compiled mask
path (``ready(MASKS)``: the arena kernels and ``earley_masks``, about half of the compile) in a
helper process, everything else in the first; each takes the other's twins meanwhile.

``LOCALGUIDE_COMPILE=foreground`` (``numba_tools.COMPILE_MODE``) compiles them in the process
instead, at their first call.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import numba_tools

MARKER = "grammar-kernels.done"
LOCK = "grammar-kernels.lock"
LOG = "grammar-kernels.log"
STALE_S = 30 * 60  # a lock older than this is a warm-up that died without removing it
_CHILD_ENV = "_LOCALGUIDE_WARMUP_CHILD"
_PART_ENV = "_LOCALGUIDE_WARMUP_PART"
MASKS, REST = "masks", "rest"  # the compiled mask path; every other grammar kernel
# In a warm-up process: the part it compiles (the other part's kernels are not taken there).
_part = os.environ.get(_PART_ENV) or None

_ready = False
_checked = 0.0
_started = False


def kernels() -> list:
    """Every grammar kernel that Python calls (their callees are compiled into them)."""
    from ..llama import candidates_kernels, native_kernels
    from . import arena_kernels, lexer_kernels, masks_kernels, trees_kernels

    return [lexer_kernels.scanner_closure, trees_kernels.grammar_trees, trees_kernels.union_groups,
            trees_kernels.union_bits, arena_kernels.earley_intern, arena_kernels.earley_seed,
            arena_kernels.earley_rehash, arena_kernels.earley_restore, candidates_kernels.mask_candidates_bits,
            candidates_kernels.gather_bits, candidates_kernels.gather_top,
            masks_kernels.earley_masks, native_kernels.prepared_apply, native_kernels.prepared_accept]


def ready(part: str = REST) -> bool:
    """Whether this process takes the grammar kernels (of ``part``: ``MASKS`` asks for the compiled
    mask path): in the foreground mode (or ``kernels_only``), when they are loaded here, or once
    the warm-up's marker says numba's cache holds them all (looked at every quarter of a second
    at most). A warm-up process takes those of the part it compiles, and no others."""
    global _ready, _checked
    if _part is not None:
        return part == _part
    if _ready or numba_tools._KERNELS_ONLY:
        return True
    now = time.monotonic()
    if now - _checked < 0.25:
        return False
    _checked = now
    ks = kernels()
    if all(k.signatures for k in ks) or _marker_ok(ks):
        _ready = True
    return _ready


def _folder() -> Path | None:
    """Where numba keeps the grammar kernels (beside ``earley_masks``'s index)."""
    from . import masks_kernels

    index = numba_tools.cache_index(masks_kernels.earley_masks)
    return Path(index).parent if index else None


def _stamp(ks) -> str:
    """The kernels' source files as numba sees them (a new checkout or edit makes a new stamp)."""
    from ..numba_cache import kernels_stamp

    files = sorted({k.py_func.__code__.co_filename for k in ks} | {numba_tools.__file__})
    parts = [kernels_stamp()]
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            return ""
        parts.append(f"{f}:{st.st_mtime_ns}:{st.st_size}")
    return "\n".join(parts)


def _marker_ok(ks) -> bool:
    folder = _folder()
    if folder is None:
        return False
    try:
        text = (folder / MARKER).read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return text == _stamp(ks) and all(numba_tools.compiled(k) for k in ks)


def start() -> None:
    """Compile the grammar kernels in a background process: once per process, unless they are
    ready, the foreground mode is on, or another process is compiling them already."""
    global _started
    if _started or numba_tools.COMPILE_MODE != "background" or os.environ.get(_CHILD_ENV) or ready():
        return
    _started = True
    folder = _folder()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = folder / LOCK
        if not _take(lock):
            return
        from ..numba_cache import kernels_dir

        env = dict(os.environ, _LOCALGUIDE_WARMUP_CHILD="1", _LOCALGUIDE_KERNELS_DIR=str(kernels_dir()))
        code = "import sys; from localguide.grammar.warmup import main; sys.exit(main(sys.argv[1:]))"
        with open(folder / LOG, "wb") as log:
            # (run from the folder that holds this localguide: the child imports this one)
            p = subprocess.Popen([sys.executable, "-c", code, str(lock)], cwd=Path(__file__).resolve().parents[2],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True, close_fds=True)
        lock.write_text(str(p.pid), "utf-8")
    except OSError:
        pass  # (a read-only cache folder: the first uses stay on the numpy and Python paths)


def _take(lock: Path) -> bool:
    """Create ``lock``; a lock whose process is gone, or that is older than ``STALE_S``, is taken over."""
    for _ in range(2):
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return True
        except FileExistsError:
            try:
                old = time.time() - lock.stat().st_mtime > STALE_S
                pid = int(lock.read_text("utf-8") or 0)
            except (OSError, ValueError):
                old, pid = True, 0
            if not old and (pid == 0 or _alive(pid)):
                return False  # compiling now (or just starting)
            lock.unlink(missing_ok=True)
    return False


def _alive(pid: int) -> bool:
    if os.name == "nt":
        return True  # (os.kill would end it: the lock's age decides)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


# --- the warm-up process ------------------------------------------------------------------

_GRAMMAR = r"""
start: value
?value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
array: "[" [value ("," value)*] "]"
STRING: /"[a-z ]*"/
NUMBER: /-?[0-9]+(\.[0-9]+)?/
%ignore /[ \t\n]+/
"""
_TEXT = b'{"a": [1, -2.5, "b c", {"d": null}], "e": true}'
_TOKENS = [b"<eos>", b"{", b"}", b"[", b"]", b",", b":", b'"', b" ", b"a", b"b", b"c", b"d", b"e", b"1", b"2", b"-",
           b".", b"5", b"t", b"r", b"u", b"n", b"l", b'{"', b'":', b'": ', b", ", b'"b', b" c", b"true", b"null",
           b"}]", b"},", b"]}", b"\n", b"  ", b'":"', b"-2", b".5"]


def warm(part: str | None = None) -> None:
    """Compile the grammar kernels (of ``part``; None: all), with the argument types of real use:
    a grammar compiled here and one loaded from a cache file, with and without a token budget,
    before and after a flush. ``part`` is the warm-up process's own (``_part``): the other
    part's kernels give way to their twins there."""
    from .. import cache
    from ..regex.ast_dfa import warm_kernels
    from ..vocabulary import Vocabulary
    from .cfg import normalize
    from .compiled import GrammarIndex
    from .sources import DEFAULT_MAX_IGNORED_RUN, to_cfg

    rest = part in (None, REST)
    if rest:
        warm_kernels()  # the automaton kernels of large terminals
    vocab = Vocabulary.from_tokens(_TOKENS, stop_ids=[0])
    with numba_tools.kernels_only() if rest else contextlib.nullcontext():
        cfg = normalize(to_cfg(_GRAMMAR, "lark", "the warm-up grammar"), DEFAULT_MAX_IGNORED_RUN)
        idx = GrammarIndex(cfg, vocab, "the warm-up grammar", lazy=True)
        _walk(idx, vocab, rest)
        arrays = idx.arrays(seed=True)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "warm-up"
            cache.save(path, arrays)
            loaded = GrammarIndex.from_arrays(cache.load(path), vocab)
            _walk(loaded, vocab, rest)
            loaded.flush()
            _walk(loaded, vocab, rest)
            del loaded


def _walk(idx, vocab, sample: bool = True) -> None:
    """Write ``_TEXT`` through guides of ``idx``, greedily by the longest allowed token."""
    for budget in (None, 64):
        g = idx.guide(max_tokens=budget)
        pos = 0
        while pos < len(_TEXT):
            mask = g.mask()
            if sample:
                _sample(mask, vocab.size)
            allowed = g.allowed_token_ids().tolist()
            best = max((t for t in allowed if vocab[t] and _TEXT.startswith(vocab[t], pos)),
                       key=lambda t: len(vocab[t]), default=None)
            if best is None:
                raise RuntimeError(f"the warm-up text is not in the warm-up grammar at byte {pos}")
            g.advance(best)
            pos += len(vocab[best])
        g.mask()


def _sample(mask, n: int) -> None:
    """The sampler's kernels on a grammar mask, over a candidate array as llama.cpp lays it out:
    the Python callbacks' and the prepared block's (``GuideSampler``), whose C callbacks are
    compiled too."""
    import numpy as np

    from ..llama import candidates_kernels, native_kernels
    from ..protocol import MaskKind

    def candidates():
        data = np.zeros((n, 3), np.int32)
        data[:, 0] = np.arange(n)
        return data, np.array([data.ctypes.data, n, -1, 0], np.int64)

    if mask.kind == MaskKind.BITS:
        data, header = candidates()
        candidates_kernels.mask_candidates_bits(header.ctypes.data, mask.data)
        logits = np.zeros(n, np.float32)
        out = np.zeros((n, 3), np.int32)
        candidates_kernels.gather_bits(mask.data, logits.ctypes.data, n, out.ctypes.data, n)
    words = np.ascontiguousarray(mask.data, np.uint64 if mask.kind == MaskKind.BITS else np.int32)
    logits = np.zeros(n, np.float32)
    out = np.zeros((1, 3), np.int32)
    candidates_kernels.gather_top(int(mask.kind), words.ctypes.data, len(words), logits.ctypes.data, n, 1,
                                  out.ctypes.data)
    data, header = candidates()
    block = np.array([int(mask.kind), words.ctypes.data, len(words), -1, 0], np.int64)
    native_kernels.prepared_apply(block, header.ctypes.data)
    native_kernels.prepared_accept(block, np.int32(0))
    native_kernels.prepared_callbacks()


def _helper() -> subprocess.Popen | None:
    """The process that compiles the ``MASKS`` part beside this one, where the machine has a second
    core (None: this one compiles both)."""
    if (os.cpu_count() or 1) < 2:
        return None
    env = dict(os.environ, **{_CHILD_ENV: "1", _PART_ENV: MASKS})
    code = "import sys; from localguide.grammar.warmup import main; sys.exit(main([]))"
    try:
        return subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                                stdin=subprocess.DEVNULL, env=env, close_fds=True)
    except OSError:
        return None


def _warm_part(part: str) -> None:
    global _part
    _part = part
    try:
        warm(part)
    finally:
        _part = None


def main(argv: list[str]) -> int:
    """The warm-up process: with a lock path, the first one (it writes the marker once both
    parts are compiled); without, the helper of ``_helper`` (its part in ``_PART_ENV``)."""
    lock = Path(argv[0]) if argv else None
    try:
        if hasattr(os, "nice") and os.nice(0) < 10:
            os.nice(10 - os.nice(0))  # the process that waits for no one yields to the one a person waits for
        if lock is None:
            warm(_part)
            return 0
        ks = kernels()
        helper = _helper()
        if helper is None:
            warm()
        else:
            _warm_part(REST)
            try:
                failed = helper.wait(timeout=STALE_S) != 0  # (its log says why, above)
            except subprocess.TimeoutExpired:
                helper.kill()
                failed = True
            if failed:
                _warm_part(MASKS)
        folder = _folder()
        if folder is not None:
            tmp = folder / f"{MARKER}.{os.getpid()}"
            tmp.write_text(_stamp(ks), "utf-8")
            os.replace(tmp, folder / MARKER)
        return 0
    finally:
        if lock is not None:
            try:
                if lock.read_text("utf-8") in ("", str(os.getpid())):
                    lock.unlink()
            except OSError:
                pass

