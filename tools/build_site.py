"""Build the static site of the course from the committed notebooks' outputs.

    .venv/bin/python tools/build_site.py [--out build/site] [--katex .venv/katex/node_modules/katex]

One page per notebook (its prose, code, printed output and figures as committed), an index page with
the notebook table (the README's, when it has one linking notebooks/NN_*.ipynb; otherwise one made
from each notebook's title and opening question), previous/next links on every page. Math is rendered
to HTML at build time by KaTeX (npm package `katex`, installed by `make setup-ui`), so the pages load
no script and nothing from the network. A live slider cannot run on a static page: its output is
replaced by a note pointing at the static figure drawn just before it. `_site.json` lists the pages
and how many formulas each holds, for the browser check (tools/ui_check.py).
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbconvert.filters import strip_ansi
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import colab  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KATEX = ROOT / ".venv" / "katex" / "node_modules" / "katex"
COURSE = "FlashAttention from first principles"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
SLIDER_NOTE = (
    "Live slider: it runs in JupyterLab or Colab, not on a static page. "
    "The figure above is the same drawing at the slider's default settings."
)
NOTEBOOK_LINK = re.compile(r"^(?:\./)?notebooks/(\d\d_[\w-]+)\.ipynb$")

__all__ = [
    "Page",
    "MathRenderer",
    "render_math",
    "notebook_pages",
    "notebook_title",
    "opening_question",
    "readme_table",
    "rewrite_links",
    "render_outputs",
    "build",
]


# ---------------------------------------------------------------- math


def math_parts(tex: str) -> list[str]:
    """A display formula cut at its top-level `\\qquad` and `\\quad` (outside braces, brackets, parentheses
    and environments): the pieces a narrow column stacks and a wide one sets side by side."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(tex):
        if tex.startswith(("\\begin{", "\\left"), i):
            depth += 1
        elif tex.startswith(("\\end{", "\\right"), i):
            depth -= 1
        elif tex[i] == "\\":
            m = re.match(r"\\(qquad|quad)(?![a-zA-Z])", tex[i:])
            if m and depth == 0:
                parts.append(tex[start:i])
                start = i + m.end()
            i += m.end() if m else 2  # a command's backslash, or an escaped character
            continue
        elif tex[i] in "{([":
            depth += 1
        elif tex[i] in "})]":
            depth -= 1
        i += 1
    parts.append(tex[start:])
    parts = [p.strip() for p in parts if p.strip()]
    return parts if parts else [tex.strip()]


def slug(text: str) -> str:
    """An anchor from a heading's text: lower case, letters and digits joined by hyphens."""
    text = re.sub(r"\$[^$]*\$", lambda m: re.sub(r"\\[a-zA-Z]+", " ", m.group(0)), text)
    return "-".join(re.findall(r"[a-z0-9]+", text.lower())) or "section"


def heading_id(text: str) -> str:
    """The anchor of a heading: `section-N` for "N. Title" (the prose cites "section N"), `exercise-N`
    for "Exercise N (kind): title", else the heading's slug."""
    m = re.match(r"\s*(\d+)\.\s", text)
    if m:
        return f"section-{m.group(1)}"
    m = re.match(r"\s*Exercise (\d+)\b", text)
    if m:
        return f"exercise-{m.group(1)}"
    return slug(text)


def markdown_headings(source: str) -> list[str]:
    """The text of every ATX heading (`#`, `##`, ...) of a markdown source, in order, code fences skipped."""
    out, fence = [], False
    for line in source.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        elif not fence:
            m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                out.append(m.group(1))
    return out


class MathRenderer(IPythonRenderer):
    """nbconvert's markdown renderer with math typeset from `self.math`: {(tex, display): html}.

    With `math=None` it only collects the formulas it meets into `self.seen` (the first of two passes).
    Headings get an id (`heading_id`, unique within `used`, one page's ids) and a link to themselves; a
    display formula is set as its pieces (`math_parts`), which wrap when the column is narrow.
    """

    def __init__(self, math: dict | None = None, headings=(), used=None, **kwargs):
        super().__init__(escape=False, exclude_anchor_links=True, **kwargs)
        self.math, self.seen = math, []
        self.headings, self.used = list(headings), used if used is not None else set()

    def _math(self, tex: str, display: bool) -> str:
        key = (tex.strip(), display)
        self.seen.append(key)
        if self.math is None:
            return ""
        return self.math[key]

    def heading(self, text: str, level: int, **attrs) -> str:
        raw = self.headings.pop(0) if self.headings else re.sub(r"<[^>]+>", "", text)
        anchor, n = heading_id(raw), 2
        while anchor in self.used:
            anchor, n = f"{heading_id(raw)}-{n}", n + 1
        self.used.add(anchor)
        return (
            f'<h{level} id="{anchor}">{text}<a class="anchor" href="#{anchor}" '
            f'aria-label="link to this heading">¶</a></h{level}>\n'
        )

    def block_math(self, body: str) -> str:
        parts = math_parts(body)
        if len(parts) == 1:
            return self._math(body, True)
        pieces = "".join(
            f'<span class="math-part">{self._math(p, True)}</span>' for p in parts
        )
        return f'<span class="math-parts">{pieces}</span>'

    def latex_environment(self, name: str, body: str) -> str:
        return self._math(f"\\begin{{{name}}}{body}\\end{{{name}}}", True)

    def inline_math(self, body: str) -> str:
        return self._math(body, False)


def markdown(source: str, math: dict | None = None, used=None) -> tuple[str, list]:
    """HTML of a markdown cell and the formulas it holds (as (tex, display) keys); `used`: the page's
    heading ids so far."""
    renderer = MathRenderer(math, markdown_headings(source), used)
    return MarkdownWithMath(renderer=renderer).render(source), renderer.seen


def render_math(keys, katex: Path = KATEX) -> dict:
    """Typeset every (tex, display) in `keys` with KaTeX in one node process: {(tex, display): html}.

    Raises ValueError listing every formula KaTeX cannot parse.
    """
    keys = sorted(set(keys))
    if not keys:
        return {}
    if not (Path(katex) / "package.json").exists():
        raise FileNotFoundError(f"KaTeX not found at {katex}: run `make setup-ui`")
    proc = subprocess.run(
        ["node", str(Path(__file__).with_name("katex_render.js")), str(katex)],
        input=json.dumps([{"tex": t, "display": d} for t, d in keys]),
        capture_output=True,
        text=True,
        check=True,
    )
    results = json.loads(proc.stdout)
    errors = [
        f"  {tex!r}: {r['error']}" for (tex, _), r in zip(keys, results) if "error" in r
    ]
    if errors:
        raise ValueError("KaTeX cannot typeset:\n" + "\n".join(errors))
    return {key: r["html"] for key, r in zip(keys, results)}


# ---------------------------------------------------------------- notebooks


@dataclass
class Page:
    """One notebook's page: where it comes from, where it goes, and what it holds."""

    path: Path
    nb: object
    title: str
    file: str
    math: list = field(default_factory=list)


def notebook_pages(notebooks_dir: Path) -> list[Page]:
    """The course's notebooks (NN_*.ipynb, in order) as pages, each titled by its first heading."""
    pages = []
    for path in sorted(Path(notebooks_dir).glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        pages.append(Page(path, nb, notebook_title(nb, path.stem), path.stem + ".html"))
    return pages


def notebook_title(nb, default: str) -> str:
    """The text of the notebook's first level-1 heading, or `default`."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            m = re.search(r"^#\s+(.+?)\s*#*\s*$", cell.source, re.M)
            if m:
                return m.group(1)
    return default


def opening_question(nb) -> str:
    """The question the notebook answers: the first sentence ending in "?" of the paragraph after its
    title (emphasis dropped), else that paragraph's first sentence."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", cell.source) if p.strip()]
        body = [p for p in paragraphs if not p.startswith("#")]
        if body:
            text = " ".join(body[0].replace("**", "").split())
            sentences = re.findall(r"[^.?!]*?(?:\$[^$]*\$[^.?!]*?)*[.?!](?=\s|$)", text)
            sentences = [s.strip() for s in sentences if s.strip()] or [text]
            question = next((s for s in sentences if s.endswith("?")), sentences[0])
            return question[0].upper() + question[1:]
    return ""


# ---------------------------------------------------------------- index


def readme_table(readme: str) -> str | None:
    """The first markdown table in `readme` whose rows link notebooks/NN_*.ipynb, as markdown; else None."""
    lines = readme.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("|"):
            j = i
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            block = lines[i:j]
            if len(block) >= 3 and re.search(
                r"\]\((?:\./)?notebooks/\d\d_[\w-]+\.ipynb\)", "\n".join(block)
            ):
                return "\n".join(block)
            i = j
        else:
            i += 1
    return None


def rewrite_links(body: str, pages: set[str], repo_url: str) -> str:
    """Point the links of rendered HTML `body` into the site: notebooks/NN_x.ipynb -> NN_x.html.

    A notebook without a page loses its link (its text stays); other relative links go to the repository.
    """

    def fix(m):
        attrs, href = m.group(1), html.unescape(m.group(2))
        nb = NOTEBOOK_LINK.match(href)
        if nb:
            page = nb.group(1) + ".html"
            return f'<a{attrs} href="{page}"' if page in pages else f"<a{attrs}"
        if re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", href, re.I):
            return m.group(0)
        target = re.sub(
            r"^(\./|\.\./)+", "", href
        )  # notebooks link ../REFERENCES.md: the root's
        return (
            f'<a{attrs} href="{html.escape(repo_url)}/blob/main/{html.escape(target)}"'
        )

    return re.sub(r'<a\b([^>]*?)\shref="([^"]*)"', fix, body)


def table_from_notebooks(pages: list[Page]) -> str:
    """A markdown notebook table made from the notebooks themselves (when the README has none)."""
    rows = ["| # | notebook | the question it answers |", "| --- | --- | --- |"]
    for page in pages:
        number = page.path.stem[:2]
        question = opening_question(page.nb).replace("|", "\\|")
        rows.append(
            f"| {number} | [{page.title}](notebooks/{page.path.name}) | {question} |"
        )
    return "\n".join(rows)


# ---------------------------------------------------------------- cells


def render_outputs(outputs, stem: str, cell_index: int, images: dict) -> str:
    """HTML of a code cell's outputs; figures go into `images` as {file name: bytes}."""
    parts = []
    for k, out in enumerate(outputs):
        kind = out.get("output_type")
        if kind == "stream":
            cls = "stderr" if out.get("name") == "stderr" else "stdout"
            parts.append(
                f'<pre class="output {cls}">{html.escape(strip_ansi(out.get("text", "")))}</pre>'
            )
        elif kind == "error":
            text = strip_ansi(
                "\n".join(out.get("traceback", []))
                or f"{out.get('ename')}: {out.get('evalue')}"
            )
            parts.append(f'<pre class="output error">{html.escape(text)}</pre>')
        elif kind in ("display_data", "execute_result"):
            parts.append(
                render_data(out.get("data", {}), f"{stem}_{cell_index:02d}_{k}", images)
            )
    return "\n".join(p for p in parts if p)


def render_data(data: dict, name: str, images: dict) -> str:
    """HTML of one rich output, by preference: widget note, PNG, SVG, HTML, text."""
    plain = data.get("text/plain", "")
    if WIDGET_MIME in data:
        if "Slider(" in plain or plain.startswith(("interactive(", "FigureSliders(")):
            return f'<p class="widget-note">{html.escape(SLIDER_NOTE, quote=False)}</p>'
        return (
            f'<pre class="output">{html.escape(strip_ansi(plain))}</pre>'
            if plain
            else ""
        )
    if "image/png" in data:
        images[name + ".png"] = base64.b64decode(data["image/png"])
        return f'<img class="figure" src="img/{name}.png" alt="figure {name}">'
    if "image/svg+xml" in data:
        images[name + ".svg"] = data["image/svg+xml"].encode()
        return f'<img class="figure" src="img/{name}.svg" alt="figure {name}">'
    if "text/html" in data:
        return f'<div class="output html">{data["text/html"]}</div>'
    if plain:
        return f'<pre class="output">{html.escape(strip_ansi(plain))}</pre>'
    return ""


def solution_title(source: str) -> tuple[str, str]:
    """(summary, code) of a hidden solution cell: its Colab `# @title` line becomes the summary, without the
    "(double-click or 'show code' to open)" that only Colab and JupyterLab need; the code loses that line."""
    first, _, rest = source.partition("\n")
    if not first.startswith("# @title "):
        return "Worked solution", source
    title = re.sub(
        r"\s*\((?:double-click|click)[^)]*\)\s*$", "", first[len("# @title ") :]
    )
    return (title.strip() or "Worked solution"), rest


def render_cells(page: Page, math: dict | None, images: dict) -> str:
    """The body of a notebook's page (with `math=None`: only collect its formulas into page.math)."""
    parts, page.math, used = [], [], set()
    formatter = HtmlFormatter(cssclass="highlight")
    for i, cell in enumerate(page.nb.cells):
        if colab.is_colab_cell(cell):
            continue
        if cell.cell_type == "markdown":
            body, seen = markdown(cell.source, math, used)
            page.math += seen
            parts.append(f'<div class="cell markdown">{body}</div>')
        elif cell.cell_type == "code":
            solution = "solution" in cell.get("metadata", {}).get("tags", [])
            title, source = (
                solution_title(cell.source) if solution else ("", cell.source)
            )
            code = highlight(source, PythonLexer(), formatter)
            outputs = render_outputs(cell.get("outputs", []), page.path.stem, i, images)
            block = f'<div class="cell code">{code}{outputs}</div>'
            if solution:
                block = (
                    f'<details class="solution"><summary>{html.escape(title)}</summary>'
                    f"{block}</details>"
                )
            parts.append(block)
    return "\n".join(parts)


# ---------------------------------------------------------------- pages

CSS = """
body { font: 17px/1.55 system-ui, sans-serif; color: #1b1b1b; margin: 0; }
main, header.site, footer.site { max-width: 58rem; margin: 0 auto; padding: 0 1.2rem; }
header.site, footer.site { display: flex; gap: 1rem; justify-content: space-between; padding-top: .8rem;
  padding-bottom: .8rem; border-bottom: 1px solid #ddd; font-size: 15px; }
footer.site { border-top: 1px solid #ddd; border-bottom: none; margin-top: 2rem; }
a { color: #0b5cad; } a:not([href]) { color: inherit; }
pre, code { font: 14px/1.45 ui-monospace, monospace; }
.cell.code { margin: 1rem 0; }
.highlight { background: #f6f8fa; border-left: 3px solid #9ab; padding: .1rem .8rem; overflow-x: auto; }
.highlight pre, pre.output { white-space: pre-wrap; overflow-wrap: anywhere; }
pre.output { margin: .3rem 0 0; padding: .2rem .8rem; overflow-x: auto; }
.output.html { overflow-x: auto; }
h1 .anchor, h2 .anchor, h3 .anchor, h4 .anchor { margin-left: .4rem; color: #9ab; text-decoration: none;
  visibility: hidden; } :is(h1, h2, h3, h4):hover .anchor { visibility: visible; }
:target { scroll-margin-top: 1rem; }
.math-parts { display: flex; flex-wrap: wrap; align-items: baseline; column-gap: 2.5em; margin: 1em 0; }
.math-parts .katex-display { margin: .3em 0; }
pre.output.stderr { background: #fff4e5; } pre.output.error { background: #fdecea; }
img.figure { max-width: 100%; display: block; margin: .5rem 0; }
.widget-note { border: 1px dashed #9ab; padding: .4rem .8rem; color: #345; font-size: 15px; }
blockquote { border-left: 4px solid #0b5cad; margin: 1rem 0; padding: .2rem 1rem; background: #f3f7fc; }
details.solution { margin: 1rem 0; } details.solution summary { cursor: pointer; color: #0b5cad; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: .3rem .6rem; vertical-align: top; }
.katex-display { overflow-x: auto; overflow-y: hidden; }
"""


def layout(
    title: str, body: str, prev: Page | None = None, next_: Page | None = None
) -> str:
    """A full HTML page: header and footer with contents / previous / next links around `body`."""

    def nav():
        left = (
            f'<a rel="prev" href="{prev.file}">← {html.escape(prev.title)}</a>'
            if prev
            else "<span></span>"
        )
        right = (
            f'<a rel="next" href="{next_.file}">{html.escape(next_.title)} →</a>'
            if next_
            else "<span></span>"
        )
        return f'{left}<a href="index.html">Contents</a>{right}'

    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<link rel="stylesheet" href="_static/katex/katex.min.css">
<link rel="stylesheet" href="_static/pygments.css">
<link rel="stylesheet" href="_static/site.css">
</head>
<body>
<header class="site">{nav()}</header>
<main>
{body}
</main>
<footer class="site">{nav()}</footer>
</body>
</html>
"""


def build(
    out: Path,
    notebooks_dir: Path = ROOT / "notebooks",
    readme: Path = ROOT / "README.md",
    katex: Path = KATEX,
    repo_url: str | None = None,
) -> dict:
    """Write the site into `out` (emptied first); return its manifest {"pages": [...]}."""
    repo_url = repo_url or colab.repository_url()
    pages = notebook_pages(notebooks_dir)
    readme_text = (
        Path(readme).read_text(encoding="utf-8") if Path(readme).exists() else ""
    )
    table = readme_table(readme_text) or table_from_notebooks(pages)

    # Pass 1: collect every formula; typeset them all in one KaTeX run; pass 2: render.
    scratch: dict = {}
    keys = markdown(table)[1]
    for page in pages:
        render_cells(page, None, scratch)
        keys += page.math
    math = render_math(keys, katex)

    if out.exists():
        shutil.rmtree(out)
    (out / "img").mkdir(parents=True)
    shutil.copytree(
        Path(katex) / "dist",
        out / "_static" / "katex",
        ignore=shutil.ignore_patterns(
            "*.js", "*.mjs", "contrib", "*.md", "katex.css", "katex-swap*"
        ),
    )
    (out / "_static" / "site.css").write_text(CSS, encoding="utf-8")
    (out / "_static" / "pygments.css").write_text(
        HtmlFormatter(cssclass="highlight").get_style_defs(".highlight"),
        encoding="utf-8",
    )
    files = {p.file for p in pages}
    manifest = {"pages": []}

    table_html, table_math = markdown(table, math)
    index = (
        f"<h1>{html.escape(COURSE)}</h1>\n<p>Each notebook as committed, with its printed results and "
        "figures; run them in JupyterLab to move the sliders.</p>\n"
        + rewrite_links(table_html, files, repo_url)
    )
    (out / "index.html").write_text(
        layout(COURSE, index, None, pages[0] if pages else None), encoding="utf-8"
    )
    manifest["pages"].append(
        {"file": "index.html", "title": COURSE, "math": len(table_math)}
    )

    for i, page in enumerate(pages):
        images: dict = {}
        body = rewrite_links(render_cells(page, math, images), files, repo_url)
        for name, data in images.items():
            (out / "img" / name).write_bytes(data)
        prev = pages[i - 1] if i > 0 else None
        next_ = pages[i + 1] if i + 1 < len(pages) else None
        (out / page.file).write_text(
            layout(f"{page.title} · {COURSE}", body, prev, next_), encoding="utf-8"
        )
        manifest["pages"].append(
            {
                "file": page.file,
                "title": page.title,
                "math": len(page.math),
                "images": len(images),
            }
        )
    (out / "_site.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site")
    parser.add_argument(
        "--notebooks",
        type=Path,
        default=ROOT / "notebooks",
        help="folder of NN_*.ipynb",
    )
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument(
        "--katex",
        type=Path,
        default=KATEX,
        help="the npm package folder node_modules/katex",
    )
    args = parser.parse_args(argv)
    manifest = build(args.out, args.notebooks, args.readme, args.katex)
    n_math = sum(p["math"] for p in manifest["pages"])
    print(f"site: {len(manifest['pages'])} pages, {n_math} formulas -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
