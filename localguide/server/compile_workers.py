"""Constraints compiled in worker processes, for a server that must keep answering meanwhile.

A compile holds Python's interpreter lock while it runs: in the server's own process, slow
compiles delayed every other request and ``/health``. A worker here is a fresh interpreter
(``python -m localguide.server.compile_workers``: never a fork of a process running llama.cpp's
threads, and unlike ``multiprocessing``'s spawn it imports nothing of the server's main script)
that loads the model's vocabulary only, compiles what it is sent with nothing deferred
(``lazy=False``) and writes the compiled arrays to the disk cache (``localguide.runtime.cache``), from
which the server then loads them. Workers run at a lower priority (``nice``) than the server:
on a busy machine, decoding and answering come first. Messages go as pickles over the worker's
stdin and stdout (its own prints go to stderr).

A compile past its deadline kills its worker, and a fresh one replaces it: the time is charged
to that compile only. A worker that dies (out of memory, a signal) is replaced too, and the
compile it held is an error. A worker whose server is gone exits.
"""

from __future__ import annotations

import importlib
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..constraint import as_constraint
from ..errors import LocalguideError

START_TIMEOUT = 300.0  # seconds a worker may take to start (a first load builds the vocabulary's cache)
RETRY_AFTER = 5.0      # seconds before a worker that could not start is tried again
NICE = 10              # a worker's priority below the server's (CFS: about a tenth of a contended core)


class CompileTimeout(LocalguideError):
    """A compile that ran past its deadline (its worker was killed)."""


class WorkerLost(LocalguideError):
    """A worker that died while it compiled, or none that could start."""


class _Worker:
    """A worker process and its replies (read by a thread of its own, so a wait can time out)."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, name="localguide-compile-read", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                self.replies.put(pickle.load(self.process.stdout))
        except Exception:  # noqa: BLE001 - the pipe ended (or was cut): the worker is gone
            self.replies.put(None)

    def send(self, message) -> None:
        data = pickle.dumps(message)  # (whole first: an unpicklable argument leaves the pipe clean)
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def alive(self) -> bool:
        return self.process.poll() is None


class CompileWorkers:
    """``workers`` processes that compile constraints over the vocabulary of the GGUF file at
    ``model_path`` into the disk cache. ``compile`` blocks until a worker is free (callers bound
    how many wait); ``close`` ends them all."""

    def __init__(self, model_path, workers: int = 2, *, nice: int = NICE):
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self._path, self._nice = str(Path(model_path)), nice
        self._idle: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._live: set[_Worker] = set()
        self._closed = False
        self.failed: str | None = None  # why the last worker could not start (None: they start)
        for _ in range(workers):
            self._replace()

    # -- the server's side ------------------------------------------------------------------------
    def compile(self, constraint, timeout: float, on_start=None) -> None:
        """Compile ``constraint`` (a ``Constraint`` whose source and options pickle, or its arguments) into the
        disk cache. Raises the compile's own error (its type and message), ``CompileTimeout``
        when it runs over ``timeout`` seconds counted from when a worker takes it (``on_start()``
        is called then), or ``WorkerLost``."""
        constraint = as_constraint(constraint)
        w = self._take()
        try:
            w.send(constraint)
        except OSError:
            self._discard(w)
            raise WorkerLost("a compile worker went away; retry") from None
        except BaseException:
            self._idle.put(w)
            raise
        if on_start is not None:
            on_start()
        try:
            reply = w.replies.get(timeout=timeout)
        except queue.Empty:
            self._discard(w)
            raise CompileTimeout(f"compiling the constraint took over {timeout:g} s") from None
        if reply is None:
            try:
                code = w.process.wait(1)
            except subprocess.TimeoutExpired:
                code = None
            self._discard(w)
            raise WorkerLost(f"compiling the constraint ended its worker process ({_ended(code)})")
        self._idle.put(w)
        if reply[0] == "error":
            raise _rebuilt(*reply[1:])

    def close(self) -> None:
        """End every worker (one compiling, or still starting, is killed)."""
        with self._lock:
            self._closed = True
            workers = list(self._live)
        for w in workers:
            try:
                w.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + 2
        for w in workers:
            try:
                w.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            self._end(w)

    def _take(self) -> _Worker:
        while True:
            with self._lock:
                if self._closed:
                    raise WorkerLost("the server is shutting down")
                failed = self.failed if not self._live else None
            if failed is not None and self._idle.empty():
                raise WorkerLost(f"no compile worker could start ({failed})")
            try:
                w = self._idle.get(timeout=0.5)
            except queue.Empty:
                continue
            if w.alive():
                return w
            self._discard(w)  # (died while idle)

    def _discard(self, w: _Worker) -> None:
        """End ``w`` (killed if need be) and start another in its place."""
        self._end(w)
        self._replace()

    def _end(self, w: _Worker) -> None:
        if w.alive():
            w.process.kill()
        try:
            w.process.wait(5)
        except subprocess.TimeoutExpired:
            pass
        for f in (w.process.stdin, w.process.stdout):
            try:
                f.close()
            except OSError:
                pass
        with self._lock:
            self._live.discard(w)

    def _replace(self) -> None:
        threading.Thread(target=self._start, name="localguide-compile-start", daemon=True).start()

    def _start(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # (the worker imports this localguide)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        cmd = [sys.executable, "-m", "localguide.server.compile_workers", self._path, str(self._nice), str(os.getpid())]
        while True:
            with self._lock:  # (a worker still starting is ended by close() too)
                if self._closed:
                    return
                try:
                    w = _Worker(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env))
                except OSError as e:
                    w, why = None, f"{type(e).__name__}: {e}"
                else:
                    self._live.add(w)
                    why = None
            if w is not None:
                try:
                    hello = w.replies.get(timeout=START_TIMEOUT)
                except queue.Empty:
                    hello = ("failed", f"it did not start within {START_TIMEOUT:g} s")
                if hello is None:
                    try:
                        code = w.process.wait(1)
                    except subprocess.TimeoutExpired:
                        code = None
                    hello = ("failed", _ended(code))
                why = None if hello[0] == "ready" else hello[1]
            with self._lock:
                if why is None and not self._closed:
                    self.failed = None
                    self._idle.put(w)
                    return
                closed = self._closed
            if w is not None:
                self._end(w)
            if closed:
                return
            self.failed = why
            time.sleep(RETRY_AFTER)


def _ended(code) -> str:
    if code is None:
        return "it stopped answering"
    if code < 0:
        return f"killed by signal {-code}; out of memory?"
    return f"exit status {code}"


# -- the worker's side --------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    """A worker: ``python -m localguide.server.compile_workers MODEL NICE SERVER_PID``."""
    import signal

    model_path, nice, server_pid = argv[0], int(argv[1]), int(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (Ctrl-C reaches the whole group: the server ends us)
    inp, out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # (whatever prints goes to stderr, never into the replies)
    try:
        os.nice(nice)
    except (AttributeError, OSError):
        pass
    threading.Thread(target=_watch, args=(server_pid,), name="localguide-watch", daemon=True).start()

    def reply(message) -> None:
        out.write(pickle.dumps(message))
        out.flush()

    try:
        from ..vocabulary import Vocabulary
        from ..runtime import cache

        vocabulary = Vocabulary.from_gguf(Path(model_path))
        _warm_up(vocabulary)
    except Exception as e:  # noqa: BLE001 - said to the server, which retries
        reply(("failed", f"{type(e).__name__}: {e}"))
        return 1
    reply(("ready",))
    while True:
        try:
            constraint = pickle.load(inp)
        except (OSError, EOFError, pickle.UnpicklingError):
            return 0
        if constraint is None:
            return 0
        # (all of it now: the server loads it whole)
        whole = {"lazy": False} if constraint.kind in ("grammar", "json_schema", "xml_calls") else {}
        try:
            constraint.compile(vocabulary, **whole)
            cache.flush()
            answer = ("ok",)
        except Exception as e:  # noqa: BLE001 - the compile's error is the request's answer
            answer = ("error", *_described(e))
        try:
            reply(answer)
        except OSError:
            return 0


def _warm_up(vocabulary) -> None:
    """Build a small regex and grammar index (kept nowhere), so that their kernels load now, not
    in the first request's compile, which its timeout bounds."""
    from ..grammar.cfg import normalize
    from ..grammar.compiled import GrammarIndex
    from ..grammar.sources import DEFAULT_MAX_IGNORED_RUN, to_cfg
    from ..index import Index
    from ..regex.parser import regex_to_dfa
    import localguide.json_schema  # noqa: F401

    Index.build(regex_to_dfa("[0-9]{2}[a-z]"), vocabulary)
    cfg = normalize(to_cfg('start: "a" B\nB: /[0-9]+/', "lark", "warm-up"), DEFAULT_MAX_IGNORED_RUN)
    GrammarIndex(cfg, vocabulary, "warm-up", lazy=False)


def _watch(server_pid: int) -> None:
    """Exit once the server is gone (killed before it could end us)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != server_pid:
            os._exit(0)


def _described(e: BaseException) -> tuple:
    """(module, class name, message, attributes) of ``e``: rebuilt in the server as the same type,
    without calling its ``__init__`` (whose arguments the message no longer holds)."""
    attrs = {}
    for k, v in vars(e).items():
        try:
            pickle.dumps(v)
        except Exception:  # noqa: BLE001 - an attribute the server cannot have: left out
            continue
        attrs[k] = v
    return type(e).__module__, type(e).__qualname__, str(e), attrs


def _rebuilt(module: str, name: str, message: str, attrs: dict) -> BaseException:
    cls = None
    if module == "builtins" or module.split(".")[0] == "localguide":
        try:
            cls = importlib.import_module(module)
            for part in name.split("."):
                cls = getattr(cls, part)
        except (ImportError, AttributeError):
            cls = None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return RuntimeError(f"{name}: {message}")
    e = cls.__new__(cls)
    Exception.__init__(e, message)
    e.__dict__.update(attrs)
    return e


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
