"""The wheels scripts/device_check carries to the GPU machine lent to this project, which lacks them: put
into .device-carry/ here (pip download, for the machine's CPython), installed into /tmp there.

The device tool sends the working tree and the ignored paths a call names in `carry`, 64 MiB in all, and
the machine reaches no package index; its image holds torch, transformers, peft, accelerate and their
stack (/work/.library/device/KINDS.md lists it), not what the checks add to that.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What the GPU machine lent here lacks of what the checks import (its image: /work/.library/device/KINDS.md
# lists torch, transformers, peft, accelerate, tokenizers, pandas, pyarrow, ...): TRL (which imports
# `datasets` at its top, and datasets dill and multiprocess), the settings tree (pydantic, pydantic-settings)
# and the store of the LEARN phase (sqlite-utils). Carried as wheels of the versions installed here.
CARRY = ["trl", "datasets", "dill", "multiprocess", "pydantic", "pydantic-core", "pydantic-settings",
         "annotated-types", "typing-inspection", "typing-extensions", "python-dotenv", "sqlite-utils",
         "sqlite-migrate", "sqlite-fts4", "click-default-group"]
CARRY_DIR = REPO / ".device-carry"
CARRY_LIMIT_MIB = 64  # the device tool's limit on the working tree plus what is carried
DEVICE_PYTHON = "3.12"
CARRY_SITE = Path("/tmp/appliance-device-carry")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(path: Path) -> tuple[str, str]:
    """(canonical distribution name, version) of a wheel file."""
    name, version = path.name.split("-")[:2]
    return canonical(name), version


def prepare_carry(folder: Path = CARRY_DIR) -> list[Path]:
    """The wheels of CARRY, at the versions installed here, for the GPU machine's CPython, in `folder` (pip
    download once, from the indexes pip is configured with; later calls reuse them). Exactly one wheel a
    package is left there: two versions of one stop the install on the GPU machine."""
    from importlib.metadata import version

    folder.mkdir(exist_ok=True)
    pins = {canonical(n): version(n) for n in CARRY}
    for w in folder.glob("*.whl"):
        if pins.get(wheel_name(w)[0]) != wheel_name(w)[1]:
            w.unlink()  # another version, or no longer carried
    have = {wheel_name(w)[0] for w in folder.glob("*.whl")}
    missing = [f"{n}=={v}" for n, v in pins.items() if n not in have]
    if missing:
        platforms = [a for tag in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                                   "manylinux2014_x86_64", "manylinux1_x86_64") for a in ("--platform", tag)]
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               "--python-version", DEVICE_PYTHON, "--implementation", "cp", *platforms,
                               "-d", str(folder), *missing], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"pip download {' '.join(missing)} failed: {proc.stderr.strip()[-800:]}")
    return sorted(folder.glob("*.whl"))


def tree_bytes() -> int:
    """What the device tool sends besides the carried folder: tracked and untracked-not-ignored files."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return sum((REPO / f).stat().st_size for f in out.split("\0") if f and (REPO / f).is_file())


def install_carried() -> list[str]:
    """On the GPU machine: the carried wheels installed into CARRY_SITE, first on this process's path and its
    children's (PYTHONPATH); what was carried, with the versions, and any requirement the machine's own
    packages miss (a carried wheel newer than what the image holds)."""
    import importlib.metadata as md

    wheels = sorted(CARRY_DIR.glob("*.whl"))
    if not wheels:
        return []
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--upgrade", "--target", str(CARRY_SITE), *map(str, wheels)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"installing the carried wheels failed: {proc.stderr.strip()[-800:]}")
    sys.path.insert(0, str(CARRY_SITE))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CARRY_SITE), os.environ.get("PYTHONPATH")]))
    import importlib

    importlib.invalidate_caches()
    lines = [f"carried: {', '.join(f'{n} {v}' for n, v in map(wheel_name, wheels))}"]
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return lines
    carried = {wheel_name(w)[0] for w in wheels}
    for dist in md.distributions(path=[str(CARRY_SITE)]):
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            name = canonical(req.name)
            if name in carried:
                continue
            try:
                have = md.version(req.name)
            except md.PackageNotFoundError:
                lines.append(f"  {dist.metadata['Name']} needs {req}: not on this machine")
                continue
            if req.specifier and not req.specifier.contains(have, prereleases=True):
                lines.append(f"  {dist.metadata['Name']} needs {req}: this machine has {have}")
    return lines
