"""A headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages separated by NUL bytes on file descriptors 3 and 4), so a test can load a page,
wait in real time for what it does, and read its DOM or take a screenshot."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time


class Browser:
    def __init__(self):
        path = shutil.which("chromium") or shutil.which("chromium-browser")
        if path is None:
            raise RuntimeError("Debian's chromium is needed (apt-get install chromium; .ci/run installs it)")
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()
        self.proc = subprocess.Popen(
            [path, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False,  # (fds 3 and 4 are made in the child, after the parent's would be closed)
            preexec_fn=lambda: (os.dup2(to_chrome_r, 3), os.dup2(from_chrome_w, 4)))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.session = None

    def call(self, method: str, timeout: float = 30, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            while b"\0" not in self._buf:
                chunk = os.read(self._r, 1 << 16)
                if not chunk:
                    raise RuntimeError("the browser closed its pipe")
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
        raise TimeoutError(method)

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", url=url)["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def evaluate(self, expression: str):
        got = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return got["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while not self.evaluate(expression):
            if time.time() > deadline:
                raise TimeoutError(expression)
            time.sleep(0.2)

    def screenshot(self, path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            os.close(self._w)
            os.close(self._r)
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
