"""A `batchlab serve` subprocess on 127.0.0.1 for end-to-end tests: a free port, a
bounded wait on /health, and a stop by its process id (SIGINT, then kill)."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 180  # loading torch and the model on a busy 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def batchlab(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the command line in a subprocess (this tree's code), output captured."""
    return subprocess.run([sys.executable, "-m", "batchlab", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


class ServeProcess:
    def __init__(self, *args: str, out: Path, env: dict | None = None, port: int | None = None) -> None:
        """port 0: the server picks one and says which (read from its log when ready)."""
        self.port = free_port() if port is None else port
        self.base = f"http://127.0.0.1:{self.port}"
        self.out, self.log = out, out.parent / f"{out.name}.log"
        cmd = [sys.executable, "-m", "batchlab", "serve", "--host", "127.0.0.1",
               "--port", str(self.port), "--out", str(out), *args]
        self._log = open(self.log, "w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
        self.returncode: int | None = None

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"batchlab serve exited ({self.proc.returncode}): {self.log.read_text()}")
            if self.port == 0:  # the address it printed, once it has
                found = re.search(r"http://127\.0\.0\.1:(\d+)/v1", self.log.read_text())
                if not found:
                    time.sleep(0.3)
                    continue
                self.port = int(found.group(1))
                self.base = f"http://127.0.0.1:{self.port}"
            try:
                if httpx.get(f"{self.base}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"batchlab serve not healthy after {START_TIMEOUT_S} s: {self.log.read_text()}")

    def stop(self) -> int:
        """Ctrl-C (SIGINT), as a user stops it; kill if it does not stop in time."""
        if self.returncode is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
                try:
                    self.proc.wait(60)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            self.returncode = self.proc.returncode
            self._log.close()
        return self.returncode
