"""The notebook support code: setup, memory measurement, exercise checks, the memory-wall slider."""

import numpy as np
import pytest

import lab


def test_setup_notebook_seeds_everything():
    import torch

    rng = lab.setup_notebook()
    a, t = rng.standard_normal(3), torch.rand(2)
    rng2 = lab.setup_notebook()
    np.testing.assert_array_equal(a, rng2.standard_normal(3))
    assert torch.equal(t, torch.rand(2))


def test_peak_bytes_sees_the_two_matrices_of_standard_attention():
    rng = np.random.default_rng(0)
    N, d = 512, 16
    q, k, v = (rng.standard_normal((N, d)).astype(np.float32) for _ in range(3))
    peak, o = lab.peak_bytes(lab.attention_naive, q, k, v)
    analytic = lab.attention_bytes(N, itemsize=4)
    assert o.shape == (N, d)
    assert analytic <= peak < 1.2 * analytic
    peak_flash, _ = lab.peak_bytes(lab.flash_attention_numpy, q, k, v)
    assert peak_flash < analytic / 5


def test_attention_bytes():
    assert lab.attention_bytes(4096) == 2 * 4096**2 * 4
    assert lab.attention_bytes(10, 20, itemsize=2, heads=3) == 2 * 10 * 20 * 2 * 3
    with pytest.raises(ValueError, match="itemsize"):
        lab.attention_bytes(10, itemsize=0)


def test_check_reports_pass_fail_and_not_implemented(capsys):
    def stub(x):
        raise NotImplementedError

    lab.check(np.exp, np.exp, [(np.ones(2),)])
    assert "✓ passed 1 cases" in capsys.readouterr().out
    lab.check(stub, np.exp, [(np.ones(2),)])
    assert "not implemented yet" in capsys.readouterr().out
    lab.check(np.sin, np.exp, [(np.ones(2),)])
    assert (
        "✗ case 0 ([1., 1.]): at index [0] expected 2.71828, got 0.841471"
        in capsys.readouterr().out
    )
    lab.check(lambda x: 1 / 0, np.exp, [(1.0,)])
    assert "ZeroDivisionError" in capsys.readouterr().out
    lab.check(lambda x: (x, x), lambda x: (x, x), [(1.0,)])
    assert "✓ passed" in capsys.readouterr().out
    lab.check(lambda x: (x, x + 1), lambda x: (x, x), [(1.0,)])
    assert "element 1 of the tuple: expected 1, got 2" in capsys.readouterr().out


def _sanitize(text: str) -> str:
    """Apply tests/sanitize.cfg's replacements, as strict nbval does before it compares."""
    import configparser
    import pathlib
    import re

    cfg = configparser.ConfigParser()
    cfg.read(pathlib.Path(__file__).with_name("sanitize.cfg"))
    for section in cfg.sections():
        text = re.sub(cfg[section]["regex"], cfg[section]["replace"], text)
    return text


def test_measured_values_are_masked_and_verdicts_compared(capsys):
    assert lab.report("max |o - ref|", 3.1e-8, 1e-6) is True
    assert lab.report("max |o - ref|", 3.6e-8, 1e-6) is True
    first, second = capsys.readouterr().out.splitlines()
    assert first == "max |o - ref| = ‹3.1e-08›  (< 1e-06: True)"
    assert first != second and _sanitize(first) == _sanitize(
        second
    )  # another CPU's rounding: same text
    lab.report("max |o - ref|", 2e-6, 1e-6)
    failed = capsys.readouterr().out
    assert _sanitize(failed) != _sanitize(first)  # a verdict that flips: caught
    assert lab.report("speedup", 3.0, 2, op=">=", fmt=".2f", unit="x") is True
    assert capsys.readouterr().out == "speedup = ‹3.00 x›  (>= 2: True)\n"
    assert lab.report("nan", float("nan"), 1.0) is False
    assert lab.report("time", 12.5, fmt=".1f", unit="ms") is None
    assert "time = ‹12.5 ms›" in capsys.readouterr().out
    assert _sanitize(f"t {lab.measured(1.5, '>7.1f')} |") == _sanitize(
        f"t {lab.measured(123.25, '>7.1f')} |"
    )
    with pytest.raises(ValueError, match="op"):
        lab.report("x", 1.0, 2.0, op="==")


def test_check_diagnoses_what_is_wrong_and_where(capsys):
    ref = lambda x: (x * 2, x.sum(axis=-1))
    x = np.arange(12.0).reshape(3, 4)
    lab.check(
        lambda x: (x * 2, x.sum(axis=-1, keepdims=True)),
        ref,
        [(x,)],
        names=("o", "lse"),
    )
    out = capsys.readouterr().out
    assert (
        "✗ case 0 (array (3, 4) float64)" in out
        and "lse (element 1): shape: yours is (3, 1), expected (3,)" in out
    )
    lab.check(
        lambda x: (x * 2 + (x == 5), x.sum(axis=-1)), ref, [(x,)], names=("o", "lse")
    )
    out = capsys.readouterr().out
    assert (
        "o (element 0): at index [1, 1] expected 10, got 11" in out
        and "largest |error| 1.00e+00" in out
    )
    assert "1 of 12 values outside" in out
    with np.errstate(invalid="ignore"):
        lab.check(
            lambda x: (x * 2 / (x != 0), x.sum(axis=-1)),
            ref,
            [(np.ones(2),), (x,)],
            names=("o", "lse"),
        )
    assert (
        "✗ case 1" in (out := capsys.readouterr().out)
        and "NaN in yours at index [0, 0]" in out
    )
    lab.check(
        lambda x: x * 2,
        ref,
        [(x,)],
        names=("o", "lse"),
        hint=lambda case, got, want: "return both o and lse",
    )
    out = capsys.readouterr().out
    assert (
        "returned ndarray, expected a tuple of 2 (o, lse)" in out
        and "  hint: return both o and lse" in out
    )
    lab.check(lambda x: -np.inf * x, lambda x: np.inf * x, [(np.ones(2),)])
    assert "expected inf, got -inf" in capsys.readouterr().out
    lab.check(ref, ref, [(x,), (np.ones(1),)], names=("o", "lse"))
    assert (
        capsys.readouterr().out == "<lambda>: ✓ passed 2 cases\n"
    )  # a pass is one line


def test_check_runs_property_checks_after_the_values_agree(capsys):
    reads = []

    def once(fn, case, got):
        return (
            None
            if len(reads) <= 1
            else f"x was read {len(reads)} times; one pass reads it once"
        )

    def twice(x):
        reads.extend([1, 1])
        return x + 1

    lab.check(twice, lambda x: x + 1, [(np.ones(3),)], properties=[once])
    assert (
        "✗ case 0 ([1., 1., 1.]): x was read 2 times; one pass reads it once"
        in capsys.readouterr().out
    )
    reads.clear()
    lab.check(lambda x: x + 1, lambda x: x + 1, [(np.ones(3),)], properties=[once])
    assert "✓ passed 1 cases" in capsys.readouterr().out


def test_folded_shows_its_summary_as_text_and_the_whole_text_behind_a_click():
    import pytest

    import lab

    f = lab.folded("def f(x):\n    return x < 1\n", "the source of f")
    assert repr(f) == "the source of f (3 lines, folded)"
    page = f._repr_html_()
    assert page.startswith("<details><summary>the source of f</summary><pre>")
    assert "return x &lt; 1" in page  # escaped, so the source reads as written
    with pytest.raises(TypeError, match="text and summary"):
        lab.folded(None, "x")


def test_torch_imported_inside_an_answer_is_named_torch_not_another_process():
    """torch's first import starts processes of its own; a numpy-only check names torch, what the answer used."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from lab.checks import _support as s\n"
        "def answer(x):\n"
        "    import torch\n"
        "    return torch.exp(torch.as_tensor(x)).numpy()\n"
        "with s._watching(numpy_only=True) as seen:\n"
        "    answer(np.zeros(3))\n"
        "print(s._refusal(seen))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "torch" in out.stdout and "another process" not in out.stdout, out.stdout


def test_a_library_reached_through_a_symbolic_link_is_not_the_learners(tmp_path):
    """A venv reached through a link (Homebrew's opt/ → Cellar/, a linked home) names its files by the link's path:
    the kernel's own threads running there are a library's, not the learner's code handing work away."""
    import pathlib
    import threading

    from lab.checks._support import _watching
    from lab.exercises import not_yours

    link = tmp_path / "venv"
    link.symlink_to(pathlib.Path(lab.__file__).parent, target_is_directory=True)
    name = str(link / "kernel_thread.py")
    assert not_yours(name) and not not_yours("<cell 3>")
    assert not not_yours(str(tmp_path / "mine.py"))
    scope: dict = {}
    exec(compile("def idle(stop):\n    stop.wait(5)\n", name, "exec"), scope)
    stop = threading.Event()
    thread = threading.Thread(target=scope["idle"], args=(stop,))
    thread.start()
    try:
        with _watching(()) as seen:
            pass
    finally:
        stop.set()
        thread.join()
    assert "another thread" not in seen


def test_check_takes_each_cases_own_tolerance(capsys):
    """`tolerance(case)` replaces rtol and atol case by case: an error of 1e-6 passes a case that asks
    for 1e-5 and fails one that asks for 1e-9."""
    from lab.exercises import check

    off = lambda x: x * (1 + 1e-6)  # noqa: E731
    loose = lambda case: (1e-5, 0.0) if case[0].dtype == np.float32 else (1e-9, 0.0)  # noqa: E731
    check(off, lambda x: x, [(np.ones(3, np.float32),)], tolerance=loose, name="f")
    assert capsys.readouterr().out == "f: ✓ passed 1 cases\n"
    check(off, lambda x: x, [(np.ones(3),)], tolerance=loose, name="f")
    assert "✗ case 0" in capsys.readouterr().out


def test_a_refusal_names_torch_not_its_import_internals():
    from lab.checks._support import _shown

    imported = ["torch.<module>", "torch.torch_version.TorchVersion", "torch.SymInt"]
    assert _shown(imported) == "torch"
    assert _shown([*imported, "torch.softmax"]) == "torch.softmax"
    assert _shown(["lab.softmax_safe", "torch.softmax"]) == "lab.softmax_safe"
