"""`python -m minicb serve` in the background, for a notebook or a test.

    server = start_server("--max-num-seqs", "16")   # a free loopback port; returns once /health answers
    httpx.get(server.url + "/v1/models")
    server.stop()                                    # SIGTERM: the server finishes what is in flight, exits

Also `with start_server(...) as server:`. A server is stopped however its owner ends: stop(), the end of a
`with` block, Python exiting (a notebook's kernel shut down or restarted), or, on Linux, the owner dying
without a chance to clean up (the child is told by the kernel).
"""
from __future__ import annotations

import atexit
import ctypes
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

READY = re.compile(r"minicb serving .* on (http://\S+)")


@dataclass
class ServerProcess:
    process: subprocess.Popen
    url: str        # http://127.0.0.1:PORT, no trailing slash
    log_path: Path  # the server's stdout and stderr together

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metric(self, name: str, **labels: str) -> float:
        """One sample of /metrics, e.g. metric("minicb:request_success_total", finished_reason="abort")."""
        import httpx

        return metric(httpx.get(self.url + "/metrics", timeout=10).text, name, **labels)

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        atexit.unregister(self.stop)
        return self.process.returncode

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        self.log_path.unlink(missing_ok=True)


def metric(text: str, name: str, **labels: str) -> float:
    """One sample of a Prometheus text page, by name and (some of) its labels."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return sample.value
    raise KeyError(f"no sample {name}{labels or ''} in /metrics")


def _die_with_parent() -> None:
    """In the child before exec: on Linux, SIGTERM when the process that started it dies."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))   # PR_SET_PDEATHSIG


def start_server(*flags: str, device: str = "cpu", timeout: float = 180) -> ServerProcess:
    """`python -m minicb serve --device DEVICE --port 0 FLAGS`. With port 0 the server binds a free port
    itself and prints it in its ready line, so no other process can take the port between choosing and
    binding. Raises with the server's log if it exits or is not ready within `timeout` seconds."""
    log_path = Path(tempfile.mkstemp(prefix="minicb-serve-", suffix=".log")[1])
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "minicb", "serve", "--device", device, "--port", "0",
             "--uvicorn-log-level", "warning", *flags],
            stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"})
    try:
        server = ServerProcess(process, _wait_until_ready(process, log_path, timeout), log_path)
    except BaseException:
        process.kill()
        process.wait()
        raise
    atexit.register(server.stop)
    return server


def _wait_until_ready(process: subprocess.Popen, log_path: Path, timeout: float) -> str:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} before it was ready:\n"
                               f"{log_path.read_text(errors='replace')}")
        found = READY.search(log_path.read_text(errors="replace"))
        if found:
            try:
                if httpx.get(found.group(1) + "/health", timeout=5).status_code == 200:
                    return found.group(1)
            except httpx.TransportError:
                pass
        time.sleep(0.1)
    raise TimeoutError(f"the server was not ready within {timeout} s:\n{log_path.read_text(errors='replace')}")
