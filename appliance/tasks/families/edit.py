"""Small edits: change one line or value of an existing config file, Python module or shell script and keep
every other line byte-identical. Every level is table-driven (see _ops.py; the operations are in
_edit_ops_config.py, _edit_ops_lines.py and _edit_ops_code.py).

The verifier checks the change and that every other line is unchanged (`_kinds.one_line`), so a file
rewritten from memory fails even when its changed line is right; code is also run (the function's
behaviour, the script's output)."""

from __future__ import annotations

import random

# register the operations, in this order
from appliance.tasks.families import _edit_ops_code, _edit_ops_config, _edit_ops_lines  # noqa: F401
from appliance.tasks.families._ops import generate_family
from appliance.tasks.format import TaskSpec

FAMILY = "edit"
DESCRIPTION = ("small edits of existing config files, Python and shell scripts: change one line or value, keep "
               "every other line byte-identical")


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint)
