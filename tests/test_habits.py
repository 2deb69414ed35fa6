"""The habits: ruff (lint) is clean on the package, its tests and scripts, and mypy (types) on the package, as
pyproject.toml configures them.

Both tools come with the dev extra (`pip install -e '.[dev]'`). What is excluded, and why, is written
beside the exclusion in pyproject.toml.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def tool(name: str) -> str:
    """The venv's own copy first (the one the dev extra installs), else one on PATH."""
    own = Path(sys.executable).parent / name
    found = str(own) if own.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed next to {sys.executable} or on PATH: pip install -e '.[dev]'")
    return found


def test_ruff_finds_nothing_in_the_package_its_tests_and_scripts() -> None:
    result = subprocess.run([tool("ruff"), "check", "--no-cache", "appliance", "tests", "scripts"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(900)  # a cold run takes one to three minutes on a busy 2-core machine
def test_mypy_finds_nothing_in_the_package() -> None:
    # --python-executable: check against this venv's packages, wherever mypy itself is installed
    result = subprocess.run([tool("mypy"), "--python-executable", sys.executable], cwd=REPO, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
