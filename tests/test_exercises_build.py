"""Every notebook from 03 on has learners build its core routine: a worked solution of at least eight lines
of the learner's own code (the lines of the exercise's own stub, a given skeleton, do not count), none of
which the notebook's text shows."""

import re

import nbformat
import pytest
from exercise_support import ROOT, assert_says, exercises

BUILDS = {
    "03_one_pass_attention": [2],  # 1 derives one step of the normalized state
    "04_merge_order": [2, 3],
    "05_tiling": [1],
    "05_tiling_traffic": [2],
    "06_flashattention2": [1, 2, 3],
    "06_flashattention2_parallelism": [1, 2],
    "07_precision": [2],
    "07_precision_in_attention": [1, 2],
    "08_hardware_runs": [4],
    "08_triton_kernel": [2],  # 1 derives the causal band
    "09_backward": [1],
    "09_tiled_backward": [2],
    "10_decoding": [1, 2],
    "10_gqa_and_paging": [3, 4],
    "11_masks_and_score_mods": [4, 5],
}
LAYOUT = re.compile(r"[\w.'\"]*[)\]}]*[,:]?|.*[(\[{]")
CASES = [(name, number) for name, numbers in BUILDS.items() for number in numbers]


def _code(source: str) -> list[str]:
    lines = [ln.split("#")[0].strip() for ln in source.splitlines()]
    # the formatter's layout lines (`)`, `],`, a lone argument `np.float32,`, an opening
    # `s = (`) are not code a learner wrote
    return [
        ln
        for ln in lines
        if not LAYOUT.fullmatch(ln) and not ln.startswith(('"""', "def ", "@"))
    ]


@pytest.mark.parametrize(
    "name, number", CASES, ids=[f"{n[:2]}-ex{k}" for n, k in CASES]
)
def test_build_solutions_are_long_and_not_in_the_text(name, number):
    ex = {e.number: e for e in exercises(name)}[number]
    given = set(_code(ex.stub))
    learner = [ln for ln in _code(ex.solution) if ln not in given]
    assert len(learner) >= 8, learner
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    text = "\n".join(
        c.source for c in nb.cells if "solution" not in c.metadata.get("tags", [])
    )
    assert not [ln for ln in learner if ln in text]


def test_every_notebook_from_03_has_a_build():
    names = sorted(
        p.stem
        for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
        if "03" <= p.stem[:2] <= "11"
    )
    assert names == sorted(BUILDS)


def test_a_tuple_of_phrases_is_met_by_any_one_of_them():
    assert_says(
        "✗ case 2: hint: K read per query head",
        "case 2",
        ("per query head", "every byte"),
    )
    with pytest.raises(AssertionError, match="not in"):
        assert_says("✗ case 2: hint: V forgotten", ("per query head", "every byte"))
    with pytest.raises(AssertionError, match="not in"):
        assert_says("✗ case 2", "case 3")
