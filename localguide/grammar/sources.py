"""Where a grammar comes from: Lark text, GBNF text, a file path, or a shipped name.

``compile_grammar(grammar, vocabulary)`` resolves the argument, converts it to the
internal form and compiles it. Compiled grammars are kept in memory per (grammar
text, options, vocabulary), so a second compile returns the same object, masks
already computed included, and on disk (``localguide.runtime.cache``, one file per
grammar text hash, options and vocabulary fingerprint), so a new process loads the
scanner and the subterminal trees instead of building them.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..runtime import cache
from ..runtime.gcpause import paused
from ..runtime.lru import BoundedCache
from ..runtime.progress import stage
from . import packed
from .compiled import FORMAT, GrammarIndex
from .shipped import grammars_dir, is_gbnf, list_grammars  # noqa: F401 - (grammars_dir: its old place)
from ..errors import GrammarError

DEFAULT_MAX_IGNORED_RUN = 32

# (compiled grammars kept in this process: bounded, least recently used out)
_COMPILED = BoundedCache(entries=32, max_bytes=512 << 20)


def remembered(key):
    """The compiled grammar index this process holds under ``key`` (``_COMPILED``), or None."""
    return _COMPILED.get(key)


def remember(key, idx) -> None:
    """Hold ``idx`` in memory under ``key`` (least recently used out, past the cache's bounds): its
    masks, computed as parser states are met, serve the next guides too."""
    _COMPILED.put(key, idx)


def resolve(grammar) -> tuple[str, str, str]:
    """(text, kind 'lark' or 'gbnf', description) for a grammar argument."""
    if isinstance(grammar, os.PathLike):
        grammar = os.fspath(grammar)
    if not isinstance(grammar, str):
        raise TypeError(f"a grammar must be text, a path or a name, not {type(grammar).__name__}")
    shipped = list_grammars()
    if grammar in shipped:
        f = shipped[grammar]
        return f.read_text("utf-8"), f.suffix[1:], f"grammar {grammar!r}"
    if "\n" not in grammar and len(grammar) < 4096 and grammar.endswith((".lark", ".gbnf")):
        p = Path(grammar)
        if not p.is_file():
            raise GrammarError(f"grammar file not found: {grammar}")
        try:
            text = p.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise GrammarError(f"cannot read grammar file {grammar}: {e}") from None
        return text, p.suffix[1:], f"grammar {p.name!r}"
    if "\n" not in grammar and ":" not in grammar and " " not in grammar.strip():
        raise GrammarError(f"unknown grammar {grammar!r}: not a shipped grammar "
                           f"({', '.join(shipped)}), a .lark/.gbnf file, or grammar text")
    return grammar, "gbnf" if is_gbnf(grammar) else "lark", "grammar"


def to_cfg(text: str, kind: str, source: str, start: str | None = None, confined=None):
    if kind == "gbnf":
        from .gbnf import gbnf_to_cfg

        return gbnf_to_cfg(text, source)
    from .lark_frontend import lark_to_cfg

    return lark_to_cfg(text, source, start=start,
                       import_paths=[confined.loader()] if confined is not None else ())


def compile_grammar(grammar, vocabulary, *, start: str | None = None,
                    max_ignored_run: int | None = DEFAULT_MAX_IGNORED_RUN, lazy: bool = True,
                    confined=None):
    """Compile ``grammar`` (Lark text, GBNF text, a ``.lark``/``.gbnf`` path, or a shipped name).

    ``confined``: a ``Confined`` for a grammar from someone untrusted (a server's request): text
    or a name only, ``%import`` of lark's and the named grammars only (``grammar.confined``).

    ``max_ignored_run``: the longest run of ignored text (``%ignore``) allowed, in bytes
    (None: unbounded). A deliberate restriction of the grammar's language, so that no
    constraint ever allows endless whitespace; also, a sentence never ends with
    ignored text. Grammars without ``%ignore`` (GBNF) are not affected.

    ``lazy``: on a cache miss, return once the scanner is built; each subterminal tree
    is built when a mask first needs it, while a background thread builds the rest and
    then writes the cache file (``localguide.runtime.cache.flush()`` waits for it). False: build
    everything first.

    A grammar whose only sentence is the empty text (Lark ``start:``) compiles to the
    ``Index`` of the regex ``""``: generation gives "" and stops.

    Raises ``GrammarError`` (with line and column where the grammar text has them).
    """
    if max_ignored_run is not None and (not isinstance(max_ignored_run, int) or max_ignored_run < 1):
        raise ValueError("max_ignored_run must be a positive number of bytes, or None")
    if confined is not None:
        if not isinstance(grammar, str):
            raise TypeError(f"a confined grammar must be text or a name, not {type(grammar).__name__}")
        text, kind, desc = confined.resolve(grammar)
    else:
        text, kind, desc = resolve(grammar)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        line = text.count("\n", 0, e.start) + 1
        raise GrammarError(f"a lone surrogate (U+{ord(text[e.start]):04X}) is not text: expected valid Unicode",
                           line, e.start - (text.rfind("\n", 0, e.start) + 1) + 1, desc) from None
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    # (a confined grammar's imports read other files than a trusted one's: never the same entry)
    where = confined.key() if confined is not None else ""
    key = (digest, kind, start, max_ignored_run, vocabulary.fingerprint, where)
    idx = _COMPILED.get(key)
    if idx is None:
        path = cache.key_path("grammar", str(FORMAT), digest, kind, str(start), str(max_ignored_run),
                              vocabulary.fingerprint, *((where,) if where else ()))

        def make_cfg():
            from .cfg import normalize

            cfg = normalize(to_cfg(text, kind, desc, start, confined), max_ignored_run)
            if all(i in cfg.ignore for i in range(cfg.n_terminals)):
                raise _OnlyEmptyText
            return cfg

        try:
            # (a server's requests bring grammars as they bring schemas: many, so their bound)
            bound = packed.SCHEMA_PLAIN_BYTES if confined is not None else packed.PLAIN_BYTES
            idx = cached_index(path, make_cfg, vocabulary, desc, lazy, seed=True, plain_bytes=bound)
        except _OnlyEmptyText:  # (no terminal to scan: the regex of the empty text is the same language)
            from ..regex import compile_regex

            idx = compile_regex("", vocabulary)
        _COMPILED.put(key, idx)
    return idx


class _OnlyEmptyText(Exception):
    """A grammar without terminals (but ignored ones): its only sentence is the empty text."""


def cached_index(path, make_cfg, vocabulary, description: str, lazy: bool, seed: bool = False,
                 plain_bytes: int = packed.PLAIN_BYTES) -> GrammarIndex:
    """The ``GrammarIndex`` of ``make_cfg()`` (a normalized CFG), from the disk cache at ``path``
    when there; else built (``lazy``: trees on demand, the rest and the file in the background).
    ``seed``: the file holds the arena seed (``GrammarIndex.arrays``). ``plain_bytes``: the largest
    file stored plain, read without decoding (``packed.pack``)."""
    with paused():
        got: dict = {}

        def check(stored) -> bool:
            got["arrays"] = packed.unpack(stored, vocabulary.size)
            return GrammarIndex.arrays_ok(got["arrays"], vocabulary)

        stored = cache.load_checked(path, check)
        if stored is not None:
            arrays = got.get("arrays")
            if arrays is None:  # (a write of this process still pending: its packed arrays, unchecked)
                arrays = packed.unpack(stored, vocabulary.size)
            return GrammarIndex.from_arrays(arrays, vocabulary, description, checked=True)
        with stage(f"compiling {description}"):
            idx = GrammarIndex(make_cfg(), vocabulary, description, lazy=lazy)
    if lazy:
        cache.save_later(path, lambda: packed.pack(idx.arrays(seed), plain_bytes))
    else:
        cache.store(path, packed.pack(idx.arrays(seed), plain_bytes))
    return idx
