"""Opening and saving a notebook in JupyterLab changes nothing git sees.

On save, JupyterLab's frontend writes the running kernel's kernelspec into the notebook's metadata, and
the server writes the notebook as nbformat does. A server is started on copies of two notebooks (one of
the course, one learner copy); each is read and written back the way an autosave does, and must come back
byte for byte.
"""

import json
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = [
    ROOT / "notebooks" / "02_online_softmax.ipynb",
    ROOT / "learner" / "01_three_pass_softmax.ipynb",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(url, token, data=None, method="GET"):
    request = urllib.request.Request(
        url,
        data=None if data is None else json.dumps(data).encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_an_autosave_leaves_the_notebook_as_committed(tmp_path):
    for path in NOTEBOOKS:
        (tmp_path / path.parent.name).mkdir(exist_ok=True)
        shutil.copy(path, tmp_path / path.parent.name / path.name)
    port, token = _free_port(), secrets.token_hex(16)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            "--no-browser",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--ServerApp.root_dir={tmp_path}",
            f"--IdentityProvider.token={token}",
        ]
        + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                specs = _call(f"{base}/kernelspecs", token)
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "the server did not answer"
                time.sleep(0.3)
        name = specs["default"]
        spec = specs["kernelspecs"][name]["spec"]
        for path in NOTEBOOKS:
            where = f"{base}/contents/{path.parent.name}/{path.name}"
            content = _call(f"{where}?content=1", token)["content"]
            content["metadata"][
                "kernelspec"
            ] = {  # what the frontend sets from the running kernel
                "display_name": spec["display_name"],
                "language": spec["language"],
                "name": name,
            }
            _call(
                where,
                token,
                {"type": "notebook", "format": "json", "content": content},
                "PUT",
            )
            saved = (tmp_path / path.parent.name / path.name).read_bytes()
            assert saved == path.read_bytes(), f"saving {path.name} changed it"
    finally:
        server.terminate()
        server.wait(timeout=20)
