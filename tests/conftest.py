"""`pytest --policy NAME`: focus the property tests on one registered policy (the same
as BATCHLAB_TEST_POLICY=NAME; see tests/draws.py)."""
from __future__ import annotations

import os


def pytest_addoption(parser) -> None:
    parser.addoption("--policy", metavar="NAME",
                     help="property tests: draw only this registered policy")


def pytest_configure(config) -> None:
    if config.getoption("--policy"):
        os.environ["BATCHLAB_TEST_POLICY"] = config.getoption("--policy")
