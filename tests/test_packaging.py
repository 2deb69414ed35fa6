"""The installed package (what the container image gets) carries every file the source tree has."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_tracked_file_of_the_package(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path), str(REPO)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("appliance-*.whl")
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", "appliance"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    missing = sorted(f for f in tracked if f not in in_wheel)
    assert not missing, f"package-data in pyproject.toml misses {missing}"
