"""Start `lightmem serve` as a process on 127.0.0.1 and wait until it answers (benchmarks, tests, scripts)."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx


def free_port() -> int:
    """A TCP port nothing listens on now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(store: str | Path, keys: str | Path, log: Path, options: Sequence[str] = (), timeout: float = 180.0,
          cwd: str | Path | None = None) -> tuple[subprocess.Popen, str]:
    """``lightmem serve --store STORE --keys KEYS --port <free> OPTIONS`` with its output in ``log``; returns the
    process and its base URL once ``GET /healthz`` answers 200.

    Raises:
        RuntimeError: the server exited, or did not answer within ``timeout`` seconds (it is killed); the message
            ends with the log's tail.
    """
    port = free_port()
    cmd = [sys.executable, "-m", "lightmem.cli", "serve", "--store", str(store), "--keys", str(keys),
           "--port", str(port), *options]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=cwd)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}; {log}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"the server did not answer /healthz within {timeout:g} s; {log}: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """Stop the server as Ctrl-C does (its workers finish and close their stores); kill it past ``timeout``."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
