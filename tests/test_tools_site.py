"""tools/build_site.py: markdown and math, outputs, the index table, links, and a whole small build."""

from __future__ import annotations

import base64
import json
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_site  # noqa: E402
import colab  # noqa: E402

HAVE_KATEX = (build_site.KATEX / "package.json").exists() and shutil.which(
    "node"
) is not None
needs_katex = pytest.mark.skipif(
    not HAVE_KATEX, reason="KaTeX is installed by `make setup-ui`"
)
PNG = base64.b64encode(
    bytes.fromhex(  # a 1×1 PNG
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()


def test_markdown_collects_math_of_every_delimiter():
    html, seen = build_site.markdown(
        "Inline $m_i$ and $l$.\n\n$$o = acc / l$$\n\n"
        "\\begin{align}a &= b\\end{align}\n\nCode `$x$` stays."
    )
    assert seen == [
        ("m_i", False),
        ("l", False),
        ("o = acc / l", True),
        ("\\begin{align}a &= b\\end{align}", True),
    ]
    assert "<code>$x$</code>" in html


def test_markdown_substitutes_typeset_math():
    math = {
        ("m", False): '<span class="katex">M</span>',
        ("l", True): '<span class="katex-display">L</span>',
    }
    html, _ = build_site.markdown("the max $m$ and\n\n$$l$$", math)
    assert (
        '<span class="katex">M</span>' in html
        and '<span class="katex-display">L</span>' in html
    )
    assert "$" not in html


def small_notebook(with_math: bool = True):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        colab.colab_cell("https://github.com/o/r"),
        nbformat.v4.new_markdown_cell(
            "# 00 · A title\n\nWhat does it cost? More text follows here."
            + (" With $N$ keys.\n\n$$S = QK^\\top$$" if with_math else "")
        ),
        nbformat.v4.new_code_cell(
            "print('hi')",
            outputs=[
                nbformat.v4.new_output("stream", text="hi <b>\n"),
                nbformat.v4.new_output(
                    "display_data", data={"image/png": PNG, "text/plain": "<Figure>"}
                ),
            ],
        ),
        nbformat.v4.new_code_cell(
            "lab.widgets.roofline_explorer()",
            outputs=[
                nbformat.v4.new_output(
                    "execute_result",
                    execution_count=3,
                    data={
                        build_site.WIDGET_MIME: {"model_id": "x"},
                        "text/plain": "FigureSliders(children=(IntSlider(),))",
                    },
                )
            ],
        ),
        nbformat.v4.new_code_cell("def f(): return 1", metadata={"tags": ["solution"]}),
        nbformat.v4.new_code_cell(
            "1/0",
            outputs=[
                nbformat.v4.new_output(
                    "error",
                    ename="ZeroDivisionError",
                    evalue="division by zero",
                    traceback=["\x1b[31mZeroDivisionError\x1b[0m: division by zero"],
                )
            ],
        ),
    ]
    return nb


def test_title_and_opening_question():
    nb = small_notebook()
    assert build_site.notebook_title(nb, "x") == "00 · A title"
    assert build_site.opening_question(nb) == "What does it cost?"
    assert (
        build_site.notebook_title(nbformat.v4.new_notebook(), "fallback") == "fallback"
    )


def test_render_cells_drops_colab_cell_and_live_widget_keeps_figures(tmp_path):
    path = tmp_path / "00_a.ipynb"
    page = build_site.Page(path, small_notebook(with_math=False), "T", "00_a.html")
    images = {}
    body = build_site.render_cells(page, {}, images)
    assert "google.colab" not in body
    assert build_site.SLIDER_NOTE in body and "FigureSliders(" not in body
    assert list(images) == ["00_a_02_1.png"] and images["00_a_02_1.png"].startswith(
        b"\x89PNG"
    )
    assert 'src="img/00_a_02_1.png"' in body
    assert "hi &lt;b&gt;" in body
    assert "\x1b" not in body and "ZeroDivisionError" in body
    assert re.search(r'<details class="solution">.*def.*</details>', body, re.S)


def test_render_data_prefers_figures_and_escapes_text():
    images = {}
    assert (
        build_site.render_data({"text/plain": "<x>"}, "n", images)
        == '<pre class="output">&lt;x&gt;</pre>'
    )
    assert build_site.render_data(
        {"image/svg+xml": "<svg/>", "text/plain": "f"}, "n", images
    ).endswith('.svg" alt="figure n">')
    progress = build_site.render_data(
        {build_site.WIDGET_MIME: {}, "text/plain": "100%|##| 3/3"}, "n", images
    )
    assert "3/3" in progress and build_site.SLIDER_NOTE not in progress


README = """# Course

| # | notebook | question |
| --- | --- | --- |
| 00 | [The wall](notebooks/00_a.ipynb) | costs $2N^2$? |
| 01 | [Not yet](notebooks/01_b.ipynb) | later |

Other table:

| a | b |
| - | - |
"""


def test_readme_table_is_the_one_linking_notebooks():
    table = build_site.readme_table(README)
    assert (
        table.splitlines()[0] == "| # | notebook | question |"
        and len(table.splitlines()) == 4
    )
    assert build_site.readme_table("| a | b |\n| - | - |\n| 1 | 2 |\n") is None


def test_rewrite_links():
    body = (
        '<a href="notebooks/00_a.ipynb">A</a> <a href="notebooks/01_b.ipynb">B</a> '
        '<a title="t" href="lab/attention.py">src</a> <a href="https://x.org/">x</a> <a href="#s">s</a>'
    )
    out = build_site.rewrite_links(body, {"00_a.html"}, "https://github.com/o/r")
    assert '<a href="00_a.html">A</a>' in out
    assert "<a>B</a>" in out
    assert (
        '<a title="t" href="https://github.com/o/r/blob/main/lab/attention.py">' in out
    )
    assert '<a href="https://x.org/">' in out and '<a href="#s">' in out


def test_table_from_notebooks_lists_every_notebook(tmp_path):
    page = build_site.Page(
        tmp_path / "03_x.ipynb", small_notebook(), "03 · X", "03_x.html"
    )
    table = build_site.table_from_notebooks([page])
    assert "| 03 | [03 · X](notebooks/03_x.ipynb) | What does it cost? |" in table


@needs_katex
def test_render_math_typesets_and_names_bad_tex():
    out = build_site.render_math([("x^2", False), ("x^2", False), ("S", True)])
    assert set(out) == {("x^2", False), ("S", True)}
    assert (
        'class="katex"' in out[("x^2", False)] and "katex-display" in out[("S", True)]
    )
    with pytest.raises(ValueError, match=r"\\notacommand"):
        build_site.render_math([("\\notacommand{x}", False)])


@needs_katex
def test_build_writes_pages_navigation_and_no_network_reference(tmp_path):
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    nbformat.write(small_notebook(), nbdir / "00_a.ipynb")
    second = small_notebook(with_math=False)
    second.cells[1].source = "# 01 · Second\n\nWhy?"
    nbformat.write(second, nbdir / "01_b.ipynb")
    (tmp_path / "README.md").write_text(README)
    out = tmp_path / "site"
    manifest = build_site.build(
        out, nbdir, tmp_path / "README.md", repo_url="https://github.com/o/r"
    )
    assert [p["file"] for p in manifest["pages"]] == [
        "index.html",
        "00_a.html",
        "01_b.html",
    ]
    assert [p["math"] for p in manifest["pages"]] == [1, 2, 0]
    assert json.loads((out / "_site.json").read_text()) == manifest
    first, index = (out / "00_a.html").read_text(), (out / "index.html").read_text()
    assert 'rel="next" href="01_b.html"' in first and 'rel="prev"' not in first
    assert 'rel="prev" href="00_a.html"' in (out / "01_b.html").read_text()
    assert 'href="00_a.html"' in index and 'href="notebooks/' not in index
    assert first.count('class="katex"') == 2 and "$$" not in first
    for page in out.glob("*.html"):
        text = page.read_text()
        assert "<script" not in text and "//cdn" not in text and 'src="http' not in text
    assert (out / "_static/katex/katex.min.css").exists() and list(
        (out / "_static/katex/fonts").glob("*.woff2")
    )
    assert (out / "img/00_a_02_1.png").exists()
