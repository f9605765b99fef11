"""`make lab` serves JupyterLab on the repository: the course (notebooks/) and the learner's copies (exercises/).

Its /api/status answers and its root lists notebooks/ (the server is stopped afterwards)."""

import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_serves_jupyterlab():
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_TOKEN=token)
    proc = subprocess.Popen(
        ["make", "-s", "lab", "BROWSER=no", f"PORT={port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        status, deadline = None, time.monotonic() + 90
        while status is None and time.monotonic() < deadline and proc.poll() is None:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/api/status",
                headers={"Authorization": f"token {token}"},
            )
            try:
                with urllib.request.urlopen(request, timeout=2) as response:
                    status = json.load(response)
            except OSError:
                time.sleep(0.5)
        assert status is not None, (
            proc.stderr.read().decode()[-2000:]
            if proc.poll() is not None
            else "no answer"
        )
        assert "started" in status and status["kernels"] == 0
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/contents",
            headers={"Authorization": f"token {token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            names = {item["name"] for item in json.load(response)["content"]}
        assert {
            "notebooks",
            "lab",
        } <= names  # exercises/ sits beside notebooks/ once made
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
