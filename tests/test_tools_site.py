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


# ---------------------------------------------------- anchors, solution titles, code and formulas that fit


def test_headings_get_anchors_the_prose_can_cite():
    used = set()
    html, _ = build_site.markdown(
        "## 3. What one step keeps\n\n### Exercise 2 (build): the loop\n\n## Exercises",
        used=used,
    )
    assert '<h2 id="section-3">' in html and 'href="#section-3"' in html
    assert '<h3 id="exercise-2">' in html and '<h2 id="exercises">' in html
    again, _ = build_site.markdown("## Exercises", used=used)  # unique within a page
    assert '<h2 id="exercises-2">' in again


def test_every_section_of_every_notebook_has_its_anchor():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        used = set()
        body = "".join(
            build_site.markdown(c.source, None, used)[0]
            for c in nb.cells
            if c.cell_type == "markdown"
        )
        numbered = {
            m.group(1)
            for c in nb.cells
            if c.cell_type == "markdown"
            for m in re.finditer(r"^## (\d+)\. ", c.source, re.M)
        }
        assert numbered, path.name
        for n in numbered:
            assert f'id="section-{n}"' in body, (path.name, n)
        assert len(re.findall(r'\bid="([^"]+)"', body)) == len(
            set(re.findall(r'\bid="([^"]+)"', body))
        )


def test_solution_summary_drops_the_colab_hint():
    title, code = build_site.solution_title(
        "# @title Exercise 1: a worked solution (double-click or 'show code' to open)\ndef f():\n    return 1"
    )
    assert title == "Exercise 1: a worked solution" and code == "def f():\n    return 1"
    assert build_site.solution_title("x = 1") == ("Worked solution", "x = 1")


def test_no_page_says_double_click(tmp_path):
    nb = nbformat.read(ROOT / "notebooks" / "01_three_pass_softmax.ipynb", as_version=4)
    page = build_site.Page(tmp_path / "01_x.ipynb", nb, "t", "01_x.html")
    build_site.render_cells(page, None, {})
    math = {key: "" for key in page.math}
    body = build_site.render_cells(page, math, {})
    assert "double-click" not in body and "show code" not in body
    assert body.count('<details class="solution">') == sum(
        "solution" in c.metadata.get("tags", []) and c.cell_type == "code"
        for c in nb.cells
    )


def test_long_code_and_output_lines_wrap():
    css = build_site.CSS
    rule = re.search(r"\.highlight pre, pre\.output \{([^}]*)\}", css)
    assert rule and "white-space: pre-wrap" in rule.group(1)
    assert "overflow-wrap: anywhere" in rule.group(1)


def test_a_wide_display_formula_is_set_in_pieces_that_wrap():
    tex = (
        "T_r = \\lceil N / B_r \\rceil, \\qquad T_c = \\lceil M / B_c \\rceil, \\qquad\n"
        "Q_i = Q[iB_r : \\min((i+1)B_r, N)], \\quad K_j,\\, V_j = K, V[jB_c : \\min((j+1)B_c, M)]."
    )
    assert build_site.math_parts(tex) == [
        "T_r = \\lceil N / B_r \\rceil,",
        "T_c = \\lceil M / B_c \\rceil,",
        "Q_i = Q[iB_r : \\min((i+1)B_r, N)],",
        "K_j,\\, V_j = K, V[jB_c : \\min((j+1)B_c, M)].",
    ]
    # no cut inside braces, brackets, parentheses or an environment
    assert build_site.math_parts("\\text{a \\quad b} + (x \\quad y)") == [
        "\\text{a \\quad b} + (x \\quad y)"
    ]
    assert len(build_site.math_parts("\\begin{cases} a \\quad b \\end{cases}")) == 1
    _, seen = build_site.markdown(f"$${tex}$$")
    assert seen == [(p, True) for p in build_site.math_parts(tex)]
    html, _ = build_site.markdown(f"$${tex}$$", dict.fromkeys(seen, "F"))
    assert html.count('<span class="math-part">F</span>') == 4
    assert "flex-wrap: wrap" in re.search(
        r"\.math-parts \{([^}]*)\}", build_site.CSS
    ).group(1)
