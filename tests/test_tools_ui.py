"""tools/ui_check.py without a browser: the server's life cycle, the loopback gate, the pure functions."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import ui_check  # noqa: E402


def notebook_with(*outputs, path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# T"),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("w", outputs=list(outputs)),
        nbformat.v4.new_code_cell("   "),
    ]
    nbformat.write(nb, path)
    return path


def widget_output(plain: str):
    return nbformat.v4.new_output(
        "execute_result",
        data={ui_check.WIDGET_MIME: {"model_id": "m"}, "text/plain": plain},
        execution_count=1,
    )


def test_report_counts_and_closing_line(capsys):
    r = ui_check.Report()
    assert r.check("a", True) and not r.check("b", False, "why")
    assert r.summary() == "ui: 1 passed, 1 failed"
    assert "FAIL b: why" in capsys.readouterr().out


def test_report_gives_the_median_and_worst_slider_answer():
    r = ui_check.Report()
    assert r.answer_times() == "slider answers: none timed"
    r.answers += [
        ("00 widget 0 'd'", 0.08),
        ("05 widget 1 'N'", 0.31),
        ("09 widget 0 'Br'", 0.12),
    ]
    line = r.answer_times()
    assert "3 moves, median 120 ms, worst 310 ms (05 widget 1 'N')" in line


def test_free_port_is_bindable_on_loopback():
    port = ui_check.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


@pytest.mark.parametrize(
    "url, ok",
    [
        ("http://127.0.0.1:8888/lab", True),
        ("http://localhost/x", True),
        ("http://[::1]:80/", True),
        ("http://127.3.2.1/", True),
        ("data:image/png;base64,AAAA", True),
        ("blob:http://127.0.0.1/abc", True),
        ("https://cdn.jsdelivr.net/npm/katex", False),
        ("http://10.0.0.1/", False),
        ("http://192.168.1.2/", False),
        ("https://example.org/127.0.0.1", False),
    ],
)
def test_is_loopback(url, ok):
    assert ui_check.is_loopback(url) is ok


def test_slider_notebooks_picks_only_interactive_outputs_with_sliders(tmp_path):
    slider = notebook_with(
        widget_output("FigureSliders(children=(IntSlider(value=3),))"),
        path=tmp_path / "00_a.ipynb",
    )
    bar = notebook_with(
        widget_output("HBox(children=(FloatProgress(value=1.0),))"),
        path=tmp_path / "01_b.ipynb",
    )
    plain = notebook_with(
        nbformat.v4.new_output("stream", text="Slider(\n"), path=tmp_path / "02_c.ipynb"
    )
    assert ui_check.slider_notebooks([slider, bar, plain]) == [slider]
    cut = notebook_with(
        widget_output(
            "FigureSliders(children=(ToggleButtons(description='format', index=2, options=…"
        ),
        path=tmp_path / "03_d.ipynb",
    )  # the repr cut before any "Slider("
    assert ui_check.slider_notebooks([cut]) == [cut]
    assert ui_check.code_cell_count(slider) == 2  # the blank cell never runs


def test_without_outputs_clears_a_copy():
    nb = json.loads(
        nbformat.writes(
            nbformat.v4.new_notebook(
                cells=[
                    nbformat.v4.new_code_cell(
                        "1",
                        outputs=[nbformat.v4.new_output("stream", text="x")],
                        execution_count=4,
                    )
                ]
            )
        )
    )
    nb["metadata"]["widgets"] = {"state": {}}
    clean = ui_check.without_outputs(nb)
    assert (
        clean["cells"][0]["outputs"] == []
        and clean["cells"][0]["execution_count"] is None
    )
    assert "widgets" not in clean["metadata"]
    assert (
        nb["cells"][0]["execution_count"] == 4 and "widgets" in nb["metadata"]
    )  # input untouched


def test_lab_command_and_env(tmp_path):
    cmd = ui_check.lab_command(Path("/v"), tmp_path, 4321, "tok")
    assert cmd[:2] == ["/v/bin/jupyter", "lab"] and "--no-browser" in cmd
    assert {
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.port=4321",
        "--IdentityProvider.token=tok",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={tmp_path}",
    } <= set(cmd)
    base = {"MPLBACKEND": "Agg", "PATH": "/bin"}
    env = ui_check.lab_env(tmp_path, base)
    assert (
        "MPLBACKEND" not in env
        and env["PATH"] == "/bin"
        and base["MPLBACKEND"] == "Agg"
    )
    assert env["JUPYTERLAB_SETTINGS_DIR"] == str(tmp_path / "settings")
    assert all(
        env[k].startswith(str(tmp_path))
        for k in (
            "JUPYTER_CONFIG_DIR",
            "JUPYTER_RUNTIME_DIR",
            "JUPYTERLAB_WORKSPACES_DIR",
        )
    )


def test_lab_settings_keep_every_cell_in_the_dom(tmp_path):
    ui_check.write_lab_settings(tmp_path)
    tracker = json.loads(
        (
            tmp_path / "@jupyterlab/notebook-extension/tracker.jupyterlab-settings"
        ).read_text()
    )
    assert tracker["windowingMode"] == "none"


@pytest.mark.parametrize(
    "href, want",
    [
        ("00_a.html", ("http://127.0.0.1:9/00_a.html", "")),
        ("00_a.html#sec", ("http://127.0.0.1:9/00_a.html", "sec")),
        ("#top", ("http://127.0.0.1:9/index.html", "top")),
        ("img/x.png", ("http://127.0.0.1:9/img/x.png", "")),
        ("https://github.com/o/r", None),
        ("http://127.0.0.1:10/x.html", None),
    ],
)
def test_site_link_target(href, want):
    assert (
        ui_check.site_link_target(
            href, "http://127.0.0.1:9/", "http://127.0.0.1:9/index.html"
        )
        == want
    )


@pytest.mark.parametrize(
    "text, found",
    [
        ("the sum $$ x $$ here", True),
        (r"\begin{align} a \end{align}", True),
        (r"see \(x\)", True),
        (r"ratio \frac{a}{b}", True),
        (r"inline $\alpha + 1$ left", True),
        ("costs $5 and $6 each", False),
        ("plain prose, 2 · N · M bytes", False),
    ],
)
def test_raw_tex(text, found):
    assert bool(ui_check.raw_tex(text)) is found


def test_stop_process_group_ends_the_children_too():
    proc = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; wait"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    child = int(proc.stdout.readline())
    ui_check.stop_process_group(proc, grace=5)
    assert proc.poll() is not None
    assert ui_check.wait_for(lambda: not alive(child), 5)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its new parent to reap it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_serve_answers_on_loopback_and_stops(tmp_path):
    (tmp_path / "a.html").write_text("hello")
    with ui_check.serve(tmp_path) as base:
        assert base.startswith("http://127.0.0.1:")
        assert urllib.request.urlopen(base + "a.html", timeout=5).read() == b"hello"
    with pytest.raises(OSError):
        urllib.request.urlopen(base + "a.html", timeout=2)


FAKE_JUPYTER = textwrap.dedent("""\
    #!{python}
    # Stands in for `jupyter lab`: answers every GET with JSON on the port it is given.
    import http.server, json, sys
    args = dict(a[2:].split("=", 1) for a in sys.argv[2:] if "=" in a)
    if args.get("fail"):
        sys.exit(3)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps([] if "kernels" in self.path else {{"ok": True}}).encode()
            self.send_response(200); self.end_headers(); self.wfile.write(body)
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", int(args["ServerApp.port"])), H).serve_forever()
""")


@pytest.fixture
def fake_venv(tmp_path):
    script = tmp_path / "venv" / "bin" / "jupyter"
    script.parent.mkdir(parents=True)
    script.write_text(FAKE_JUPYTER.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return tmp_path / "venv"


def test_jupyterlab_waits_for_status_and_stops_even_on_error(tmp_path, fake_venv):
    seen = {}
    with pytest.raises(KeyError):
        with ui_check.jupyterlab(
            tmp_path,
            tmp_path / "scratch",
            tmp_path / "log.txt",
            venv=fake_venv,
            timeout=30,
        ) as (base, token):
            seen["status"] = ui_check.http_json(base + "/api/status", token)
            raise KeyError("a failing check")
    assert seen["status"] == {"ok": True} and len(token) >= 32
    with pytest.raises(OSError):
        ui_check.http_json(base + "/api/status", token, timeout=2)


def test_jupyterlab_reports_a_server_that_exits(tmp_path, fake_venv, monkeypatch):
    real = ui_check.lab_command
    monkeypatch.setattr(ui_check, "lab_command", lambda *a: real(*a) + ["--fail=1"])
    with pytest.raises(RuntimeError, match="exited with 3"):
        with ui_check.jupyterlab(
            tmp_path,
            tmp_path / "scratch",
            tmp_path / "log.txt",
            venv=fake_venv,
            timeout=30,
        ):
            pass
