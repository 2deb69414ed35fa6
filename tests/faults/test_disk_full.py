"""The disk full under a real `appliance run`: the checkpoints folder is a small tmpfs, filled while the
iteration trains, so the new checkpoint cannot be written. The engine must go on serving the previous
weights, nothing may record the half-written checkpoint, the run must stop with the cause after
`loop.phase_attempts`, and `appliance run` must finish it once space is freed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.schemas import EngineState, RunStatus
from appliance.store import Store
from faults.live_run import LiveRun, check_consistent, fill_disk

pytestmark = [pytest.mark.slow, pytest.mark.chaos]  # scripts/chaos: too long for every CI run

SIZE_MB = 200  # more than one tiny-model checkpoint with its optimizer state (~80 MB)


@pytest.mark.timeout(3000)
def test_a_full_disk_while_saving_a_checkpoint_keeps_the_old_weights_and_the_run_resumes(
        sandbox_settings: Settings, tiny_model: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    home = tmp_path / "home"
    checkpoints = home / "checkpoints"
    checkpoints.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m", "tmpfs", str(checkpoints)], check=True)
    try:
        run = LiveRun.create(sandbox_settings, home, tiny_model, tmp_path / "run.log",
                             APPLIANCE_LOOP__PHASE_ATTEMPTS="2")
        settings = run.settings
        run.start()
        try:
            code = run.drive([("training", lambda r: fill_disk(checkpoints))], deadline_s=2400)
            assert run.injected == ["training"], f"the training moment was missed:\n{run.tail()}"
            assert code == 1, f"the run did not stop on the full disk (exit {code}):\n{run.tail()}"
            assert "Traceback" not in run.tail(100_000) and "free space on that disk" in run.tail(), run.tail()
            store = Store(settings.db_path)
            try:
                run_row = store.latest_run()
                assert run_row is not None and run_row.status == RunStatus.FAILED
                errors = [e.message for e in store.events(run_row.id, kind="error", limit=10000)]
                assert any(f"cannot write the checkpoint {checkpoints / 'v1'}: the disk is full" in m
                           for m in errors), errors
                assert store.checkpoints(run_row.id) == []  # the half-written checkpoint is no version
                assert not (checkpoints / "v1").exists()  # and it was removed, not left holding space
                state, version, _ = store.engine_state()
                assert (state, version) == (EngineState.STOPPED, 0)
            finally:
                store.close()
            (checkpoints / "filler").unlink()  # the operator frees space
            run.resume()
        finally:
            run.stop()
        store = check_consistent(settings, run.env)
        try:
            [checkpoint] = [c for c in store.checkpoints(store.latest_run().id) if c.iteration == 1]
            assert checkpoint.policy_version == 1 and Path(checkpoint.path).is_dir()
        finally:
            store.close()
    finally:
        subprocess.run(["umount", "-l", str(checkpoints)], check=False)
