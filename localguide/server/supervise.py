"""``serve --workers``: the server in a child process, started again where a worker was lost.

llama.cpp's RPC backend aborts the whole process when a worker's connection breaks during a
decode. So with workers, ``serve`` binds the listening socket in a parent that loads no model and
hands it to a child that serves. Where the child dies, the parent answers every request on that
socket with a 503 and ``Retry-After``, naming the workers that do not answer, greets the workers
every second, and once all answer starts a child again; that child's word that it serves (a
byte on a pipe of its own, ``ready``) ends the 503s. The requests under way when a worker went are
lost with their connections (their client sees the connection close); nothing else is. In the
child, ``watch_decodes`` ends it where a call into llama.cpp waits on a worker that hangs.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

FD_VARIABLE = "_LOCALGUIDE_SERVE_FD"  # set in the child: the inherited listening socket's descriptor
READY_VARIABLE = "_LOCALGUIDE_READY_FD"  # ... and the pipe it writes a byte to once it serves
RETRY_AFTER = 5  # seconds, in the 503s
CHECK_EVERY = 1.0  # seconds between greetings of the workers while one is down
QUICK_DEATHS = 5  # children that die within a minute of their start, in a row: the parent gives up


def listening_socket(host: str, port: int) -> socket.socket:
    """The socket the children serve on, bound here so that it outlives each of them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=2048)
    sock.set_inheritable(True)
    return sock


def inherited_socket() -> socket.socket | None:
    """In a child: the listening socket its parent handed down (None in a server of its own)."""
    fd = os.environ.get(FD_VARIABLE)
    if not (fd and fd.isdigit()):
        return None
    if sys.platform.startswith("linux"):  # (ended with its parent, even a killed one: no orphan keeps serving)
        try:
            import ctypes

            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    return socket.socket(fileno=int(fd))


def unavailable(path: str, message: str) -> bytes:
    """A whole HTTP 503 response, its body in the shape the route's clients read (Ollama's for /api/)."""
    if path.startswith("/api/"):
        body = {"error": message}
    else:
        body = {"error": {"message": message, "type": "unavailable", "param": None, "code": 503}}
    data = json.dumps(body).encode()
    head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: {RETRY_AFTER}\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n")
    return head.encode() + data


class Unavailable:
    """Answers 503 on ``sock`` from a thread until ``stop``: each connection's request line is
    read (a few seconds at most), the response written, the connection closed."""

    def __init__(self, sock: socket.socket, message: str):
        self.sock, self.message = sock, message
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="localguide-unavailable", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.sock], [], [], 0.2)
            if not ready or self._stop.is_set():
                continue
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError, OSError):
                continue  # (the child took it first, or it went)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(3.0)
            data = b""
            try:
                while b"\r\n\r\n" not in data and len(data) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                parts = head.split(b"\r\n", 1)[0].split(b" ")
                path = parts[1].decode("latin-1") if len(parts) > 2 else "/"
                length = next((int(v) for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])
                               if k.strip().lower() == b"content-length" and v.strip().isdigit()), 0)
                # (the body read first, up to 4 MiB: a socket closed on unread data resets the connection,
                # and the client would see that instead of the 503)
                left = min(length, 4 << 20) - len(body)
                while left > 0:
                    chunk = conn.recv(min(left, 65536))
                    if not chunk:
                        break
                    left -= len(chunk)
                conn.sendall(unavailable(path, self.message))
                conn.shutdown(socket.SHUT_WR)
            except (OSError, ValueError):
                pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def ready() -> None:
    """In a child: tell the parent it serves now (nothing in a server of its own)."""
    fd = os.environ.pop(READY_VARIABLE, "")
    if fd.isdigit():
        try:
            os.write(int(fd), b"1")
            os.close(int(fd))
        except OSError:
            pass


STALL_CHECK_EVERY = 1.0  # seconds between a watchdog's looks at the decode under way


def watch_decodes(busy, limit: float, workers: list[str], say=None) -> threading.Thread:
    """In a child: end this process where a thread's calls into llama.cpp (``busy()``: since when,
    for each thread, ``time.monotonic()`` or None) have run ``limit`` seconds: a worker that neither
    answers nor closes its connection, on which llama.cpp would wait for good. The parent then greets
    the workers and answers 503s naming the one that does not answer. (One engine step, up to a
    prompt chunk of every sequence, must fit in ``limit``.)"""
    say = say or (lambda line: print(f"localguide: {line}", file=sys.stderr, flush=True))

    def run():
        while True:
            time.sleep(STALL_CHECK_EVERY)
            now = time.monotonic()
            if any(since is not None and now - since > limit for since in busy()):
                say(f"a decode has waited {limit:g} s on the workers ({', '.join(workers)}): ending this server, "
                    "which starts again once they all answer")
                os._exit(3)

    thread = threading.Thread(target=run, name="localguide-watchdog", daemon=True)
    thread.start()
    return thread


def _said(r: int, seconds: float) -> bool | None:
    """Whether the child wrote to its pipe ``r`` within ``seconds`` (what it wrote, read); None
    where the pipe closed without a word."""
    if not select.select([r], [], [], seconds)[0]:
        return False
    return True if os.read(r, 64) else None


def _down(workers: list[str]) -> list[str]:
    from ..engines.llamacpp.rpc import WorkerError, check_worker

    out = []
    for w in workers:
        try:
            check_worker(w, timeout=2.0)
        except WorkerError:
            out.append(w)
    return out


def supervise(argv: list[str], host: str, port: int, workers: list[str], say) -> int:
    """Serve ``argv`` (the ``localguide`` command line, ``serve ...``) in children on one socket,
    answering 503 while workers are down; the exit code. ``say``: a line for the operator."""
    sock = listening_socket(host, port)
    stopping = threading.Event()
    child: subprocess.Popen | None = None

    def on_signal(signum, frame):
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM if signum == signal.SIGTERM else signal.SIGINT)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    quick = 0  # children in a row that died within a minute of their start
    responder: Unavailable | None = None
    served = False
    try:
        while not stopping.is_set():
            started = time.monotonic()
            # (a session of its own: a terminal's Ctrl-C reaches the parent alone, which passes it on once;
            # uvicorn reads a second as "stop now, no draining")
            # (not the socket's /health: while the 503s answer on it too, a greeting may reach
            # either; a pipe per child, so that no word of a dead one is read as the next one's)
            ready_r, ready_w = os.pipe()
            env = dict(os.environ, **{FD_VARIABLE: str(sock.fileno()), READY_VARIABLE: str(ready_w)})
            try:
                child = subprocess.Popen([sys.executable, "-m", "localguide.cli", *argv], env=env,
                                         pass_fds=(sock.fileno(), ready_w), start_new_session=True)
            finally:
                os.close(ready_w)
            if stopping.is_set():  # (a signal while it started)
                child.send_signal(signal.SIGTERM)
            up = False
            silent = False  # (the pipe closed without a word: the child is ending)
            try:
                while child.poll() is None and not stopping.is_set():
                    if up or silent:
                        time.sleep(0.5)
                        continue
                    said = _said(ready_r, 0.5)
                    silent = said is None
                    if said:
                        up = served = True
                        if responder is not None:
                            responder.stop()
                            responder = None
                            say("the workers are back: serving again")
            finally:
                os.close(ready_r)
            code = child.wait()
            if stopping.is_set() or not served:
                return code  # (stopped; or the first start failed, and the child said why)
            quick = quick + 1 if time.monotonic() - started < 60 else 0
            if quick >= QUICK_DEATHS:
                say(f"the server stopped {QUICK_DEATHS} times in a row within a minute of its start: giving up")
                return code or 1
            down = _down(workers)
            message = (f"worker {', '.join(down)} is not reachable: the model's layers there are lost; the server "
                       f"starts again once {'it is' if len(down) == 1 else 'they are'} back"
                       if down else f"the server stopped (exit code {code}) and is starting again")
            say(message)
            if responder is None:
                responder = Unavailable(sock, message)
            else:
                responder.message = message
            while down and not stopping.is_set():
                time.sleep(CHECK_EVERY)
                down = _down(workers)
        return 0
    finally:
        if responder is not None:
            responder.stop()
        for s, h in previous.items():
            signal.signal(s, h)
        sock.close()
