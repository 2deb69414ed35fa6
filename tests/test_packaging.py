"""The installed package (what the container image gets) carries every file the source tree has."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_tracked_file_of_the_package(tmp_path: Path) -> None:
    tracked = subprocess.run(["git", "ls-files", "pyproject.toml", "README.md", "appliance"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    src = tmp_path / "src"  # a copy: an in-tree build would leave build/ and *.egg-info in the checkout
    for f in tracked:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / f, src / f)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("appliance-*.whl")
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    tracked = [f for f in tracked if f.startswith("appliance/")]
    missing = sorted(f for f in tracked if f not in in_wheel)
    assert not missing, f"package-data in pyproject.toml misses {missing}"
