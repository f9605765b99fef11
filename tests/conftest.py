import itertools
import zlib

import matplotlib
import numpy as np
import pytest

# Library tests draw off screen. (Not through MPLBACKEND: nbval's kernels would inherit it.)
matplotlib.use("Agg")


def pytest_addoption(parser):
    parser.addoption(
        "--installed",
        action="store_true",
        help="also run tests/test_installed.py: build the wheel, install it outside the checkout and "
        "execute every notebook there (`make test-installed`; CI runs it)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "installed: needs --installed (builds and installs the wheel)"
    )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--installed"):
        return
    skip = pytest.mark.skip(
        reason="needs --installed: `make test-installed` (CI runs it)"
    )
    for item in items:
        if "installed" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _checks_draw_per_test(request, monkeypatch):
    """The checks draw fresh cases from `np.random.SeedSequence()` (a new seed each run, for a learner). In the
    tests each draw's entropy comes from the test's id and a counter instead: a planted mistake meets the same
    cases every run, so a test cannot pass on one run and fail on the next; successive draws still differ."""
    base, count = zlib.crc32(request.node.nodeid.encode()), itertools.count()

    class PerTest(np.random.SeedSequence):
        def __init__(self, entropy=None, **kwargs):
            super().__init__(
                base + next(count) if entropy is None else entropy, **kwargs
            )

    monkeypatch.setattr(np.random, "SeedSequence", PerTest)
