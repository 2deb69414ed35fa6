"""Tasks: the format, procedural families, self-proposal, validation, difficulty control, held-out set.

Task format, version 1 (docs/TASKS.md has the full reference)
--------------------------------------------------------------
A task is a directory::

    task.toml      format_version = 1, id, family, difficulty (1..5), source (procedural | self_proposed |
                   user), instruction, [limits] max_turns + command_timeout_s, setup_timeout_s,
                   verifier_timeout_s, [workspace] protected = [paths],
                   optional [meta] (provenance: generator, seed)
    workspace/     the files the agent starts with (UTF-8 text), copied to /workspace
    setup.sh       optional bash run in /workspace before the agent starts (no network)
    verify.sh      or verify.py: run in /workspace of a fresh sandbox after the episode;
                   exit 0 = pass; may write `SCORE=<0..1>` to fd 3 (last one wins) for
                   partial credit on a failure (appliance.tasks.verify)
    solution.sh    the reference solution (bash in /workspace)

or a single TOML file with the same keys plus `setup`, `verify`, `verify_lang` ("bash" | "python"),
`solution` and `[workspace.files]` ("path" = "content") inline. In the store a task is
`TaskSpec.to_spec()`, a flat dict of the same fields (`schemas.Task.spec`).

The verifier and the reference solution never enter the agent's sandbox: `verify_workspace` runs the
verifier in a new sandbox over a copy of the final workspace, with protected files restored from the task
(and any change to them recorded as tampering).
"""

from appliance.errors import TaskFormatError
from appliance.tasks.format import FORMAT_VERSION, Limits, TaskSpec, load_task, write_task
from appliance.tasks.pool import dedupe, fingerprint
from appliance.tasks.validate import (
    REASONS, Stage, Validation, VerifyResult, validate_agent_free, verify_workspace,
)

__all__ = [
    "FORMAT_VERSION", "REASONS", "Limits", "Stage", "TaskFormatError", "TaskSpec", "Validation", "VerifyResult",
    "dedupe", "fingerprint", "load_task", "validate_agent_free", "verify_workspace", "write_task",
]
