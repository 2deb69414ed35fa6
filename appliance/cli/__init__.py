"""`appliance` commands: each a few lines over a library function (sqlite-utils' `cli.py` over `db.py`).

One module per audience, each adding its commands to the root group `main` (in `base`):

    home    the data directory: version, config, init, doctor, plan, status, backup, model show/use, export
    steer   running and steering the loop: run, tui, pause/resume/step/stop, report, train
    tasks   the practice tasks: families, synth, list, show, validate
    eval    the policy measured on task sets you bring (Harbor, Terminal-Bench 1, the appliance's own)
    debug   one piece at a time: rollout (and rollout show), sandbox exec/sweep, serve, calls

Heavy modules are imported inside the commands so `--help` stays instant.
"""

from __future__ import annotations

from appliance.cli import debug, eval, home, steer, tasks  # noqa: F401  (each adds its commands to `main`)
from appliance.cli.base import main

__all__ = ["main"]
