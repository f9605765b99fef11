"""The course in a real browser: the sliders in JupyterLab, and the static site.

    .venv/bin/python tools/ui_check.py [--site build/site] [--no-lab] [--no-site] [NOTEBOOK ...]

JupyterLab part: starts JupyterLab from this project's .venv on 127.0.0.1 (a free port, a random token)
over a scratch copy of the notebooks, and drives Debian's Chromium (/usr/bin/chromium, through
Playwright; no browser is downloaded). For every notebook with a slider (an ipywidgets.interactive
output): open it, run all cells, wait for the kernel, check that no cell shows an error and no widget
shows "Error displaying widget", then focus each slider of each interactive widget, press an arrow
key, and check that the output the widget drives (its summary line and figure) changes; each check
says how long the page took to show the new output after the key press, and the run ends with their
median and worst (a benchmark, printed, never a pass/fail). The server is stopped whatever happens.

Site part: serves build/site on 127.0.0.1 and opens every page: each loads, its math is typeset
(KaTeX elements present, no raw TeX left in the prose), and no image or link inside the site is
broken. Nothing but loopback is reached: every other request is blocked and counted as a failure.

Screenshots go to build/ui/. The last line reads `ui: N passed, M failed`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
CHROMIUM = Path("/usr/bin/chromium")
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# JupyterLab settings for a test run: every cell in the DOM, no news or update prompts, no autosave.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "windowingMode": "none",
        "autoStartDefaultKernel": True,
    },
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}

__all__ = [
    "Report",
    "free_port",
    "is_loopback",
    "slider_notebooks",
    "lab_command",
    "lab_env",
    "stop_process_group",
    "jupyterlab",
    "serve",
    "site_link_target",
    "raw_tex",
    "main",
]


# ---------------------------------------------------------------- pure functions


class Report:
    """Named checks, each passed or failed with a reason; prints one line per check as it goes."""

    def __init__(self):
        self.passed, self.failed = [], []
        self.answers = []  # (slider, seconds from the key press to the page showing the new output)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        (self.passed if ok else self.failed).append((name, detail))
        print(
            f"  {'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}",
            flush=True,
        )
        return ok

    def summary(self) -> str:
        return f"ui: {len(self.passed)} passed, {len(self.failed)} failed"

    def answer_times(self) -> str:
        """Median and worst time from a slider's key press to the page showing its new figure (a benchmark)."""
        if not self.answers:
            return "slider answers: none timed"
        times = sorted(t for _, t in self.answers)
        worst = max(self.answers, key=lambda a: a[1])
        return (
            f"slider answers in the page: {len(times)} moves, median {times[len(times) // 2] * 1e3:.0f} ms, "
            f"worst {worst[1] * 1e3:.0f} ms ({worst[0]}); polled every 20 ms, kernel and browser included"
        )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def is_loopback(url: str) -> bool:
    """Whether `url` stays on this machine (loopback host, or a data:/blob:/about: URL)."""
    parsed = urlparse(url)
    if parsed.scheme in ("data", "blob", "about", "chrome", "chrome-extension"):
        return True
    host = (parsed.hostname or "").lower()
    return host == "localhost" or host == "::1" or host.startswith("127.")


def slider_notebooks(paths) -> list[Path]:
    """Notebooks whose committed outputs hold an ipywidgets.interactive with a slider."""
    found = []
    for path in paths:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
        for cell in nb.get("cells", []):
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                plain = "".join(data.get("text/plain", ""))
                # the repr is cut at 100 characters, so a long first control can hide "Slider(": the class
                # name of lab's slider widgets tells it too
                if WIDGET_MIME in data and (
                    "Slider(" in plain or plain.startswith("FigureSliders(")
                ):
                    found.append(Path(path))
                    break
            else:
                continue
            break
    return found


def code_cell_count(path: Path) -> int:
    """How many code cells of the notebook have source (each gets an execution count when run)."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    return sum(
        1
        for c in nb.get("cells", [])
        if c.get("cell_type") == "code" and "".join(c.get("source", "")).strip()
    )


def without_outputs(nb: dict) -> dict:
    """A copy of notebook JSON `nb` with every code cell's outputs and execution count cleared."""
    nb = json.loads(json.dumps(nb))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    nb.get("metadata", {}).pop("widgets", None)
    return nb


def lab_command(venv: Path, root_dir: Path, port: int, token: str) -> list[str]:
    """The JupyterLab command line: loopback only, this port and token, no browser, as root in CI too."""
    return [
        str(venv / "bin" / "jupyter"),
        "lab",
        "--no-browser",
        "--allow-root",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root_dir}",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]


def lab_env(scratch: Path, base: dict | None = None) -> dict:
    """Environment for the server: its own config, data, runtime, settings and workspace folders."""
    env = dict(os.environ if base is None else base)
    for name, sub in (
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("JUPYTERLAB_SETTINGS_DIR", "settings"),
        ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
        ("IPYTHONDIR", "ipython"),
    ):
        env[name] = str(scratch / sub)
    env.pop("MPLBACKEND", None)  # the kernel picks the inline backend, as for a learner
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    return env


def write_lab_settings(settings_dir: Path) -> None:
    """Write LAB_SETTINGS into a JupyterLab user-settings folder."""
    for rel, values in LAB_SETTINGS.items():
        path = settings_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf-8")


def site_link_target(href: str, base: str, page_url: str) -> tuple[str, str] | None:
    """(target URL, fragment) for a link on `page_url` that stays inside the site at `base`; else None."""
    url = urljoin(page_url, href)
    if not url.startswith(base):
        return None
    page, fragment = urldefrag(url)
    return page, fragment


def raw_tex(text: str) -> list[str]:
    """Pieces of TeX left untypeset in prose: $$, \\begin{...}, \\(, \\[ or a backslash command."""
    pattern = r"\$\$|\\begin\{|\\\(|\\\[|\\[a-zA-Z]{2,}\{|\$[^$\n]{0,80}\\[a-zA-Z]+[^$\n]{0,80}\$"
    return [m.group(0) for m in re.finditer(pattern, text)]


# ---------------------------------------------------------------- processes


def stop_process_group(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM the process group of `proc` (started with start_new_session), then SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace)


def http_json(url: str, token: str, method: str = "GET", timeout: float = 5.0):
    req = urllib.request.Request(
        url, method=method, headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (loopback only)
        body = resp.read()
        return json.loads(body) if body else None


@contextlib.contextmanager
def jupyterlab(
    root_dir: Path,
    scratch: Path,
    log_path: Path,
    venv: Path = VENV,
    timeout: float = 180.0,
):
    """Run JupyterLab over `root_dir` on 127.0.0.1; yield (base URL, token); stop it whatever happens."""
    port, token = free_port(), secrets.token_hex(24)
    write_lab_settings(scratch / "settings")
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            lab_command(venv, root_dir, port, token),
            env=lab_env(scratch),
            cwd=root_dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"JupyterLab exited with {proc.returncode}; see {log_path}"
                    )
                try:
                    http_json(f"{base}/api/status", token, timeout=2)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"JupyterLab did not answer /api/status in {timeout:.0f} s"
                        ) from None
                    time.sleep(0.5)
            yield base, token
        finally:
            with contextlib.suppress(
                Exception
            ):  # let the server stop its kernels first
                for kernel in http_json(f"{base}/api/kernels", token):
                    http_json(
                        f"{base}/api/kernels/{kernel['id']}",
                        token,
                        method="DELETE",
                        timeout=10,
                    )
            stop_process_group(proc)


@contextlib.contextmanager
def serve(directory: Path):
    """Serve `directory` over HTTP on 127.0.0.1 (a free port) in a thread; yield its base URL."""
    handler = functools.partial(QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def browser(profile: Path, blocked: list):
    """A headless Chromium context with a fresh profile, reaching nothing but loopback."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise FileNotFoundError(f"{CHROMIUM} is missing: apt-get install chromium")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
            service_workers="block",
        )

        def gate(route):
            if is_loopback(route.request.url):
                route.continue_()
            else:
                blocked.append(route.request.url)
                route.abort()

        context.route("**/*", gate)
        try:
            yield context
        finally:
            context.close()


# ---------------------------------------------------------------- JupyterLab checks

JS_STATE = r"""() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  // a worked solution's input is collapsed until opened: its cell shows a placeholder, not a prompt
  const prompts = [...panel.querySelectorAll('.jp-CodeCell')].map(c => {
    if (c.querySelector('.jp-InputPlaceholder, .jp-mod-collapsed .jp-InputArea')) return 'collapsed';
    const p = c.querySelector('.jp-InputPrompt');
    return p ? p.textContent.trim() : ''; });
  const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const kernel = panel.querySelector('.jp-KernelName, .jp-Toolbar-kernelName');
  return {prompts, status: ind ? ind.getAttribute('data-status') : null,
          kernel: kernel ? kernel.textContent.trim() : '',
          dialog: document.querySelector('.jp-Dialog') ? document.querySelector('.jp-Dialog').innerText : '',
          // JupyterLab renders an error output as stderr: tell it from a warning by its traceback
          errors: [...panel.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"], '
                                             + '[data-mime-type="application/vnd.jupyter.error"]')]
                    .map(e => e.innerText.trim()).filter(t => /Traceback \(most recent call last\)/.test(t)
                      || /^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*$/m.test(t.split('\n').pop()))
                    .map(t => t.split('\n').pop().slice(0, 120)),
          widgetErrors: (panel.innerText.match(/Error displaying widget/g) || []).length,
          interacts: panel.querySelectorAll('.widget-interact').length};
}"""

JS_SIGNATURE = r"""async (el) => {
  // what the widget drives: its Output area (plain interactive) or its last child (summary + figure)
  const out = el.querySelector(':scope > .widget-output') || el.lastElementChild;
  if (!out) return {text: '', images: [], drawn: false};
  const images = [];
  for (const img of out.querySelectorAll('img')) {
    let digest = img.src.length + ':' + img.src.slice(-32);
    try {
      const bytes = await (await fetch(img.src)).arrayBuffer();
      const h = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
      digest = [...h.slice(0, 12)].map(b => b.toString(16).padStart(2, '0')).join('');
    } catch (e) {}
    images.push(digest);
  }
  const drawn = [...out.querySelectorAll('img')].some(i => i.complete && i.naturalWidth > 0);
  return {text: out.innerText.trim(), images, drawn};
}"""


def wait_for(predicate, timeout: float, interval: float = 0.25):
    """Poll `predicate()` until it returns something truthy; return it, or None after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def run_notebook(
    page,
    base: str,
    token: str,
    name: str,
    n_code: int,
    report: Report,
    shots: Path,
    timeout: float,
) -> bool:
    """Open notebook `name`, run all cells, wait until every cell ran; check no error is shown."""
    stem = Path(name).stem
    page.goto(
        f"{base}/lab/tree/{name}?token={token}&reset", wait_until="domcontentloaded"
    )

    def kernel_ready():
        s = page.evaluate(JS_STATE)
        if s and s["dialog"] and "Select Kernel" in s["dialog"]:
            page.locator(
                ".jp-Dialog .jp-mod-accept"
            ).click()  # the notebook's own kernel, python3
            return None
        return (
            s
            if (
                s
                and s["status"] == "idle"
                and s["kernel"]
                and "No Kernel" not in s["kernel"]
            )
            else None
        )

    ready = wait_for(kernel_ready, 120)
    if not report.check(f"{stem}: opens with an idle kernel", bool(ready)):
        page.screenshot(path=str(shots / f"{stem}_open.png"))
        return False
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

    def finished():
        s = page.evaluate(JS_STATE)
        done = [
            p for p in s["prompts"] if re.fullmatch(r"\[\d+\]:", p) or p == "collapsed"
        ]
        return (
            s
            if (
                s["status"] == "idle"
                and not any("*" in p for p in s["prompts"])
                and len(done) >= n_code
            )
            else None
        )

    start = time.monotonic()
    state = wait_for(lambda: finished() and (time.sleep(1.0) or finished()), timeout)
    if not state and page.evaluate(JS_STATE)["dialog"]:
        print(f"  dialog: {page.evaluate(JS_STATE)['dialog']!r}")
    page.screenshot(path=str(shots / f"{stem}_run_all.png"))
    if not report.check(
        f"{stem}: runs all {n_code} code cells",
        bool(state),
        f"{time.monotonic() - start:.1f} s"
        if state
        else f"not done after {timeout:.0f} s",
    ):
        return False
    report.check(
        f"{stem}: no cell shows an error",
        not state["errors"],
        f"{len(state['errors'])} error outputs"
        + (f": {state['errors'][:3]}" if state["errors"] else ""),
    )
    # widgets render after their cell ran: give them a moment, then look for error placeholders
    wait_for(lambda: page.evaluate(JS_STATE)["interacts"] > 0, 30)
    state = page.evaluate(JS_STATE)
    report.check(
        f"{stem}: no 'Error displaying widget'",
        state["widgetErrors"] == 0,
        f"{state['widgetErrors']} widgets failed",
    )
    return True


def move_sliders(page, stem: str, report: Report, shots: Path) -> None:
    """Focus each slider of each interactive widget, press arrow keys, check its output changes."""
    interacts = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .widget-interact")
    n = interacts.count()
    if not report.check(f"{stem}: has interactive widgets", n > 0, f"{n} found"):
        return
    for w in range(n):
        widget = interacts.nth(w)
        widget.scroll_into_view_if_needed()
        drawn = wait_for(lambda: widget.evaluate(JS_SIGNATURE)["drawn"], 60)
        report.check(f"{stem}: widget {w} draws its figure", bool(drawn))
        handles = widget.locator(".noUi-handle")
        if not report.check(
            f"{stem}: widget {w} has sliders",
            handles.count() > 0,
            f"{handles.count()} sliders",
        ):
            continue
        widget.screenshot(path=str(shots / f"{stem}_widget{w}_start.png"))
        for s in range(handles.count()):
            before = widget.evaluate(JS_SIGNATURE)

            def moved():
                sig = widget.evaluate(JS_SIGNATURE)
                return (
                    sig["drawn"]
                    and (sig["text"], sig["images"])
                    != (before["text"], before["images"])
                    and sig
                )

            changed, took = None, None
            for key in (
                "ArrowRight",
                "ArrowLeft",
                "ArrowLeft",
            ):  # at the right end, the left one moves
                handles.nth(s).focus()
                t0 = time.monotonic()
                page.keyboard.press(key)
                changed = wait_for(moved, 15, interval=0.02)
                if changed:
                    took = time.monotonic() - t0
                    break
            # let the redraw settle before the next slider
            wait_for(
                lambda: (
                    (a := widget.evaluate(JS_SIGNATURE))
                    == (time.sleep(0.4) or widget.evaluate(JS_SIGNATURE))
                    and a
                ),
                10,
            )
            errors = widget.evaluate("""(el) => [...el.querySelectorAll('[data-mime-type*="stderr"], [data-mime-type*="error"]')]
                .filter(e => /Traceback|Error/.test(e.innerText)).length""")
            label = (
                widget.locator(".widget-slider").nth(s).locator(".widget-label").first
            )
            desc = label.inner_text().strip() if label.count() else str(s)
            widget.screenshot(path=str(shots / f"{stem}_widget{w}_slider{s}.png"))
            what = []
            if changed:
                what = [
                    k
                    for k, x in (
                        ("summary", changed["text"] != before["text"]),
                        ("figure", changed["images"] != before["images"]),
                    )
                    if x
                ]
            if took is not None:
                report.answers.append((f"{stem} widget {w} '{desc}'", took))
            report.check(
                f"{stem}: widget {w} slider '{desc}' changes the output with the keyboard",
                bool(changed) and errors == 0,
                f"{' and '.join(what)} changed in {took * 1e3:.0f} ms"
                if changed
                else "output unchanged",
            )


def check_lab(
    context,
    notebooks: list[Path],
    report: Report,
    shots: Path,
    scratch: Path,
    timeout: float,
) -> None:
    """Copy `notebooks` into a scratch folder, start JupyterLab over it, and check each one."""
    root = scratch / "notebooks"
    root.mkdir(parents=True)
    for nb in (
        notebooks
    ):  # outputs cleared, so every prompt and output the checks see is from this run
        (root / nb.name).write_text(
            json.dumps(without_outputs(json.loads(nb.read_text(encoding="utf-8")))),
            encoding="utf-8",
        )
    with jupyterlab(root, scratch, shots / "jupyterlab.log") as (base, token):
        report.check(
            "JupyterLab answers /api/status on 127.0.0.1",
            True,
            base.replace(token, "…"),
        )
        for nb in notebooks:
            page = context.new_page()
            try:
                if run_notebook(
                    page,
                    base,
                    token,
                    nb.name,
                    code_cell_count(nb),
                    report,
                    shots,
                    timeout,
                ):
                    move_sliders(page, nb.stem, report, shots)
            except (
                Exception
            ) as exc:  # a broken page fails its notebook, not the whole run
                report.check(
                    f"{nb.stem}: browser session", False, f"{type(exc).__name__}: {exc}"
                )
                with contextlib.suppress(Exception):
                    page.screenshot(path=str(shots / f"{nb.stem}_failure.png"))
            finally:
                page.close()
                with contextlib.suppress(Exception):
                    for session in http_json(f"{base}/api/sessions", token):
                        http_json(
                            f"{base}/api/sessions/{session['id']}",
                            token,
                            method="DELETE",
                            timeout=10,
                        )


# ---------------------------------------------------------------- site checks

JS_PAGE = r"""() => {
  const body = document.body.cloneNode(true);
  body.querySelectorAll('pre, code, .katex, .highlight').forEach(e => e.remove());
  const k = document.querySelector('.katex');
  return {
    links: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
    ids: [...document.querySelectorAll('[id]')].map(e => e.id),
    brokenImages: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
    images: document.images.length,
    katex: document.querySelectorAll('.katex').length,
    katexErrors: document.querySelectorAll('.katex-error').length,
    katexFont: k ? getComputedStyle(k).fontFamily : '',
    prose: body.textContent,
  };
}"""


def check_site(context, site: Path, report: Report, shots: Path) -> None:
    """Open every page of the built site; check it loads, its math is typeset, no image or link is broken."""
    manifest = json.loads((site / "_site.json").read_text(encoding="utf-8"))
    expected = {p["file"]: p for p in manifest["pages"]}
    with serve(site) as base:
        page = context.new_page()
        bad_responses = []
        page.on(
            "response",
            lambda r: r.status >= 400 and bad_responses.append(f"{r.status} {r.url}"),
        )
        ids_of, queue, seen = {}, [base + "index.html"], set()
        links_to_check = []
        while queue:
            url = queue.pop(0)
            if url in seen:
                continue
            seen.add(url)
            name = url[len(base) :] or "index.html"
            response = page.goto(url, wait_until="load")
            ok = response is not None and response.ok
            if not report.check(
                f"site {name}: loads",
                ok,
                f"HTTP {response.status if response else '—'}",
            ):
                continue
            page.evaluate("document.fonts.ready.then(() => true)")
            info = page.evaluate(JS_PAGE)
            ids_of[url] = set(info["ids"])
            page.screenshot(
                path=str(shots / f"site_{Path(name).stem}.png"), full_page=False
            )
            want = expected.get(name, {}).get("math", 0)
            leftover = raw_tex(info["prose"])
            report.check(
                f"site {name}: math typeset",
                info["katex"] >= want
                and info["katexErrors"] == 0
                and not leftover
                and (want == 0 or "KaTeX" in info["katexFont"]),
                f"{info['katex']} formulas of {want}"
                + (f"; raw TeX: {leftover[:3]}" if leftover else "")
                + (
                    f"; {info['katexErrors']} KaTeX errors"
                    if info["katexErrors"]
                    else ""
                )
                + (
                    "; KaTeX stylesheet not applied"
                    if want and "KaTeX" not in info["katexFont"]
                    else ""
                ),
            )
            report.check(
                f"site {name}: images load",
                not info["brokenImages"],
                f"{info['images']} images"
                + (
                    f"; broken: {info['brokenImages'][:3]}"
                    if info["brokenImages"]
                    else ""
                ),
            )
            for href in info["links"]:
                target = site_link_target(href, base, url)
                if target is None:
                    continue
                links_to_check.append((name, href, *target))
                if target[0].endswith(".html") and target[0] not in seen:
                    queue.append(target[0])
        broken = []
        for name, href, target, fragment in links_to_check:
            if (
                target not in ids_of
            ):  # a file that is not a page (image, download): it must exist
                path = site / target[len(base) :]
                if not path.is_file():
                    broken.append(f"{name} -> {href}")
            elif fragment and fragment not in ids_of[target]:
                broken.append(f"{name} -> {href} (no #{fragment})")
        report.check(
            "site: every internal link resolves",
            not broken,
            f"{len(links_to_check)} links"
            + (f"; broken: {broken[:5]}" if broken else ""),
        )
        missing = sorted(set(expected) - {u[len(base) :] or "index.html" for u in seen})
        report.check(
            "site: every page is reachable from the index",
            not missing,
            ", ".join(missing),
        )
        report.check(
            "site: no failed request", not bad_responses, "; ".join(bad_responses[:5])
        )
        page.close()


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "notebooks",
        nargs="*",
        type=Path,
        help="default: notebooks/NN_*.ipynb with a slider",
    )
    parser.add_argument(
        "--site",
        type=Path,
        default=ROOT / "build" / "site",
        help="the built site (make site)",
    )
    parser.add_argument(
        "--shots", type=Path, default=ROOT / "build" / "ui", help="where screenshots go"
    )
    parser.add_argument(
        "--no-lab", action="store_true", help="skip the JupyterLab checks"
    )
    parser.add_argument("--no-site", action="store_true", help="skip the site checks")
    parser.add_argument(
        "--timeout",
        type=float,
        default=240.0,
        help="seconds for one notebook to run all cells",
    )
    args = parser.parse_args(argv)

    candidates = args.notebooks or sorted(
        (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
    )
    notebooks = slider_notebooks(candidates)
    if args.shots.exists():
        shutil.rmtree(args.shots)
    args.shots.mkdir(parents=True)
    report, blocked = Report(), []
    print(
        f"ui: {len(notebooks)} of {len(candidates)} notebooks have sliders: "
        f"{', '.join(p.name for p in notebooks) or '-'}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="ui-check-") as tmp:
        scratch = Path(tmp)
        try:
            with browser(scratch / "profile", blocked) as context:
                if not args.no_site:
                    check_site(context, args.site, report, args.shots)
                if not args.no_lab and notebooks:
                    check_lab(
                        context,
                        notebooks,
                        report,
                        args.shots,
                        scratch / "lab",
                        args.timeout,
                    )
        except Exception as exc:
            report.check("browser run", False, f"{type(exc).__name__}: {exc}")
    report.check(
        "nothing but loopback was requested",
        not blocked,
        "; ".join(sorted(set(blocked))[:5]),
    )
    print(f"screenshots: {args.shots}")
    print(report.answer_times())
    print(report.summary())
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
