import matplotlib

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
    import pytest

    if config.getoption("--installed"):
        return
    skip = pytest.mark.skip(
        reason="needs --installed: `make test-installed` (CI runs it)"
    )
    for item in items:
        if "installed" in item.keywords:
            item.add_marker(skip)
