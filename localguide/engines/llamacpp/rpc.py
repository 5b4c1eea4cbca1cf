"""llama.cpp's RPC backend: a model's layers on other machines' devices.

A worker (``serve_worker``, ``localguide worker``) serves its machine's devices over TCP through the
RPC server of the installed llama.cpp; a main process registers the workers' devices in llama.cpp's
backend registry (``add_workers``) before it loads a model, and llama.cpp places layers on them as on
GPUs. The guide runs where sampling runs, in the main process: every constraint works unchanged.

llama.cpp aborts the process where a worker cannot be reached or speaks another protocol version, so
each worker is greeted here first (``check_worker``: the RPC ``HELLO``, in Python): a worker that is
down or of another version is an error naming it, before llama.cpp connects. The RPC protocol has no
authentication: a worker belongs on loopback or a trusted network.

Needs a llama-cpp-python built with ``GGML_RPC=ON`` (``available()`` says whether this one was).
"""

from __future__ import annotations

import ctypes
import socket
import struct
from pathlib import Path

import llama_cpp

from ...errors import LocalguideError

# The RPC protocol of the llama.cpp that llama-cpp-python 0.3.36 vendors (ggml-rpc.h)
PROTOCOL = (7, 0, 0)
_HELLO = 14  # (RPC_CMD_HELLO: always 14, whatever the version)
_CAPS = 24  # (RPC_CONN_CAPS_SIZE: the HELLO request's bytes)
DEFAULT_PORT = 50052

_registered: dict[str, list[str]] = {}  # endpoint -> the names of its devices, once registered


class WorkerError(LocalguideError):
    """A worker that cannot be used: down, unreachable, of another protocol version."""

    def __init__(self, endpoint: str, message: str):
        self.endpoint = endpoint
        super().__init__(f"worker {endpoint}: {message}")


def _library(name: str):
    """llama.cpp's library ``name`` as libllama loaded it: a wheel holds copies, not links, of
    ``libggml.so`` and ``libggml.so.0``, and registering a device in the other copy's registry
    would hide it from llama.cpp (on Linux, the copy already mapped into the process)."""
    import re

    folder = Path(llama_cpp.__file__).parent / "lib"
    llama_cpp.llama_backend_init()
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:  # (a path may hold spaces: to the line's end)
            mapped = {m.strip() for m in re.findall(r" (/.*/lib" + re.escape(name) + r"\.so\.\d+)$", f.read(), re.M)}
    except OSError:
        mapped = set()
    for path in sorted(mapped):
        if Path(path).parent == folder:
            return ctypes.CDLL(path)
    from llama_cpp._ctypes_extensions import load_shared_library

    return load_shared_library(name, folder)


class _Ggml:
    """The few ggml backend-registry functions this needs, through ctypes."""

    def __init__(self):
        base, ggml = _library("ggml-base"), _library("ggml")
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        self.reg_by_name = _fn(ggml, "ggml_backend_reg_by_name", vp, [ctypes.c_char_p])
        self.register = _fn(ggml, "ggml_backend_register", None, [vp])
        self.load_all = _fn(ggml, "ggml_backend_load_all", None, [])
        self.dev_count = _fn(ggml, "ggml_backend_dev_count", sz, [])
        self.dev_get = _fn(ggml, "ggml_backend_dev_get", vp, [sz])
        self.proc = _fn(base, "ggml_backend_reg_get_proc_address", vp, [vp, ctypes.c_char_p])
        self.reg_dev_count = _fn(base, "ggml_backend_reg_dev_count", sz, [vp])
        self.reg_dev_get = _fn(base, "ggml_backend_reg_dev_get", vp, [vp, sz])
        self.dev_name = _fn(base, "ggml_backend_dev_name", ctypes.c_char_p, [vp])
        self.dev_description = _fn(base, "ggml_backend_dev_description", ctypes.c_char_p, [vp])
        self.dev_type = _fn(base, "ggml_backend_dev_type", ctypes.c_int, [vp])
        self.dev_memory = _fn(base, "ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)])

    def memory(self, dev) -> tuple[int, int]:
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        self.dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def rpc(self):
        """The RPC backend's registry entry, or None where this llama.cpp has none."""
        llama_cpp.llama_backend_init()
        reg = self.reg_by_name(b"RPC")
        return reg or None


def _fn(lib, name: str, restype, argtypes):
    f = getattr(lib, name)
    f.restype, f.argtypes = restype, argtypes
    return f


_ggml: _Ggml | None = None


def _g() -> _Ggml:
    global _ggml
    if _ggml is None:
        _ggml = _Ggml()
    return _ggml


def available() -> str:
    """"" where this llama.cpp has the RPC backend, else why not (with what to do)."""
    try:
        if _g().rpc() is not None:
            return ""
    except (OSError, AttributeError) as e:
        return f"llama.cpp's libraries do not load their RPC backend ({e})"
    return ("this llama-cpp-python was built without the RPC backend: CMAKE_ARGS=\"-DGGML_RPC=ON\" pip install "
            "--force-reinstall --no-cache-dir llama-cpp-python")


def parse_endpoint(text: str) -> tuple[str, int]:
    """``host:port`` (a bare host: the default port) as (host, port); ValueError saying what is wrong.
    llama.cpp reads an endpoint up to its first colon and resolves IPv4 names only: so does this."""
    host, sep, port = text.strip().partition(":")
    if not sep:
        port = str(DEFAULT_PORT)
    if host.startswith("[") or ":" in port:
        raise ValueError(f"{text!r}: llama.cpp's RPC client takes IPv4 addresses and names only (host:port)")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected a worker as host:port, got {text!r}")
    return host, int(port)


def check_worker(endpoint: str, timeout: float = 5.0) -> tuple[int, int, int]:
    """Greet the worker at ``endpoint`` (RPC ``HELLO``): its protocol version; ``WorkerError`` where
    it is down, does not answer as a worker, or speaks a version this llama.cpp does not."""
    host, port = parse_endpoint(endpoint)
    try:
        address = socket.gethostbyname(host)  # (IPv4, as llama.cpp resolves it)
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.sendall(bytes([_HELLO]) + struct.pack("<Q", _CAPS) + bytes(_CAPS))
            size = struct.unpack("<Q", _receive(sock, 8))[0]
            if size < 4 or size > 4096:
                raise WorkerError(endpoint, f"answered its greeting with {size} bytes: not a llama.cpp RPC worker")
            major, minor, patch = _receive(sock, size)[:3]
    except WorkerError:
        raise
    except (OSError, EOFError) as e:
        why = "nothing listens there" if isinstance(e, ConnectionRefusedError) else str(e) or type(e).__name__
        raise WorkerError(endpoint, f"not reachable ({why}): is `localguide worker` running there?") from None
    if major != PROTOCOL[0] or minor > PROTOCOL[1]:
        raise WorkerError(endpoint, f"speaks RPC protocol {major}.{minor}.{patch}, this llama.cpp "
                                    f"{'.'.join(map(str, PROTOCOL))}: run the same llama-cpp-python on both machines")
    return major, minor, patch


def _receive(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("the connection closed during the greeting")
        out += chunk
    return out


def add_workers(endpoints: list[str]) -> list[str]:
    """Register each worker's devices in llama.cpp's backend registry (once per endpoint and
    process; each greeted first): the names of their devices. Layers offloaded then go to them."""
    why = available()
    if why:
        raise LocalguideError(f"workers need llama.cpp's RPC backend: {why}")
    g = _g()
    rpc = g.rpc()
    add = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(g.proc(rpc, b"ggml_backend_rpc_add_server"))
    names = []
    for endpoint in endpoints:
        host, port = parse_endpoint(endpoint)
        key = f"{host}:{port}"
        if key not in _registered:
            check_worker(key)
            reg = add(key.encode())
            if not reg:
                raise WorkerError(key, "llama.cpp did not add it")
            g.register(reg)
            _registered[key] = [g.dev_name(g.reg_dev_get(reg, i)).decode()
                                for i in range(g.reg_dev_count(reg))]
            _watch_aborts()
        names += _registered[key]
    return names


_ABORT = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_on_abort_ref = None


def _watch_aborts() -> None:
    """Where llama.cpp gives up on a worker (it aborts the process: a lost connection cannot be
    recovered in it), say first which worker is gone, in a line of our own."""
    global _on_abort_ref
    if _on_abort_ref is not None:
        return

    def on_abort(message: bytes) -> None:
        import sys

        import time

        gone = []
        # (a worker serves one main process at a time: no greeting, a connection; tried a few times,
        # as a killed worker's connection can close a moment before its listening socket does)
        # A refused connection is a worker gone; one that waits is a worker busy serving this process.
        for endpoint in _registered:
            for attempt in range(3):
                try:
                    socket.create_connection(parse_endpoint(endpoint), timeout=0.5).close()
                except ConnectionRefusedError:
                    gone.append(f"worker {endpoint} is gone (nothing listens there any more)")
                    break
                except OSError:
                    break
                time.sleep(0.2 * (attempt + 1))
        text = (message or b"").decode("utf-8", "replace")
        if gone:
            tail = "llama.cpp cannot go on without it and ends this process; start the worker again and rerun"
        else:
            tail = "llama.cpp ends this process (every worker still listens: not a lost worker, it seems)"
        sys.stderr.write("".join(f"localguide: {line}\n" for line in gone) + f"localguide: llama.cpp: {text}\n"
                         + f"localguide: {tail}\n")
        sys.stderr.flush()

    _on_abort_ref = _ABORT(on_abort)  # (kept alive: llama.cpp holds the pointer)
    setter = _fn(_library("ggml-base"), "ggml_set_abort_callback", ctypes.c_void_p, [_ABORT])
    setter(_on_abort_ref)


def devices() -> list[dict]:
    """Every device llama.cpp knows in this process: name, description, free and total bytes."""
    g = _g()
    out = []
    for i in range(g.dev_count()):
        dev = g.dev_get(i)
        free, total = g.memory(dev)
        out.append({"name": g.dev_name(dev).decode(), "description": (g.dev_description(dev) or b"").decode(),
                    "free": free, "total": total})
    return out


GPU_TYPES = (1, 2)  # ggml_backend_dev_type: GGML_BACKEND_DEVICE_TYPE_GPU, _IGPU (an RPC worker's device is a GPU)


def offload_devices() -> int:
    """The devices that can hold a model's layers besides the CPU: GPUs and RPC workers added.
    (``llama_supports_gpu_offload`` says True for any build with RPC, with no worker and no GPU.)"""
    try:
        g = _g()
        return sum(g.dev_type(g.dev_get(i)) in GPU_TYPES for i in range(g.dev_count()))
    except (OSError, AttributeError, RuntimeError):  # (a build whose libraries cannot be found so)
        return int(bool(llama_cpp.llama_supports_gpu_offload()))


def serve_worker(host: str, port: int, threads: int, cache_dir: str | None = None) -> None:
    """Serve this machine's devices (its accelerators, else its CPU) to main processes until killed:
    llama.cpp's RPC server, in this thread (it never returns)."""
    why = available()
    if why:
        raise LocalguideError(f"a worker needs llama.cpp's RPC backend: {why}")
    g = _g()
    g.load_all()
    cpu, accel = None, []
    for i in range(g.dev_count()):
        dev = g.dev_get(i)
        kind = g.dev_type(dev)
        if kind == 0 and cpu is None:  # (GGML_BACKEND_DEVICE_TYPE_CPU)
            cpu = dev
        elif kind in (1, 2):  # (a GPU or an integrated GPU; accelerators and meta devices stay out, as rpc-server's)
            accel.append(dev)
    chosen = accel or [cpu]
    arr = (ctypes.c_void_p * len(chosen))(*chosen)
    start = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                             ctypes.POINTER(ctypes.c_void_p))(g.proc(g.rpc(), b"ggml_backend_rpc_start_server"))
    start(f"{host}:{port}".encode(), cache_dir.encode() if cache_dir else None, threads, len(chosen), arr)
