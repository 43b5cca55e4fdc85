"""`make lab` starts JupyterLab on the course, as root too (workshops run it in containers as root, where
JupyterLab refuses to start without --allow-root): the server answers, and the command says what it did."""
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent

if shutil.which("make") is None:
    pytest.skip("make is not installed", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_lab_serves_the_course(tmp_path):
    port, token = free_port(), "minicb-test"
    flags = f"--no-browser --ServerApp.port={port} --ServerApp.token={token} --ServerApp.port_retries=0"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path), "LAB_FLAGS": flags}
    log = tmp_path / "make-lab.log"
    with open(log, "w") as out:
        lab = subprocess.Popen(["make", "-s", "lab"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 180   # a liveness bound for a loaded machine, not a speed check
        status = None
        while status != 200:
            assert lab.poll() is None, f"make lab exited with {lab.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"JupyterLab did not answer on port {port}:\n{log.read_text()}"
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/api/contents", params={"token": token}).status_code
            except httpx.TransportError:
                time.sleep(0.5)
        listing = httpx.get(f"http://127.0.0.1:{port}/api/contents", params={"token": token}).json()
        assert "00_setup_and_model.ipynb" in {item["name"] for item in listing["content"]}, "it serves notebooks/"
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=60)
    said = log.read_text()
    if os.geteuid() == 0:
        assert "running as root (a container?), so JupyterLab starts with --allow-root" in said, said
    else:
        assert "--allow-root" not in said, said
