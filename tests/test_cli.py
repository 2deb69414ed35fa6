import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import main

REPO = Path(__file__).resolve().parents[1]


def run(args: list[str], home: Path, **env: str):
    return CliRunner().invoke(main, args, env={"APPLIANCE_HOME": str(home), **env}, catch_exceptions=False)


@pytest.mark.parametrize("cmd", [[], ["doctor"], ["init"], ["status"], ["version"], ["config"], ["serve"]])
def test_every_command_has_help(cmd: list[str], tmp_path: Path) -> None:
    r = run([*cmd, "--help"], tmp_path)
    assert r.exit_code == 0 and "Usage:" in r.output


def test_status_on_an_empty_store(tmp_path: Path) -> None:
    r = run(["status", "--json"], tmp_path)
    assert r.exit_code == 0
    data = json.loads(r.output)
    assert data["run"] is None and data["engine"]["state"] == "stopped"


def test_bad_config_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "APPLIANCE_HOME": str(tmp_path), "APPLIANCE_SANDBOX__MEMORY": "",
           "APPLIANCE_ENGINE__PORT": "80"}
    out = subprocess.run([str(REPO / ".venv/bin/appliance"), "status"], capture_output=True, text=True, env=env)
    assert out.returncode == 1
    assert "engine.port" in out.stderr and "hint:" in out.stderr
    assert "Traceback" not in out.stderr


def test_serve_starts_through_the_wiring_and_explains_a_missing_model(tmp_path: Path) -> None:
    # `serve` is app.engine_and_proxy (the engine and proxy half of app.services): its start-up line, its
    # error, and the engine left stopped in the store
    r = CliRunner().invoke(main, ["serve", "--port", "0"], catch_exceptions=False,
                           env={"APPLIANCE_HOME": str(tmp_path), "APPLIANCE_ENGINE__MODEL": str(tmp_path / "none")})
    assert r.exit_code == 1
    assert "starting the engine on http://" in r.output and "no model folder" in r.output and "hint:" in r.output
    status = json.loads(run(["status", "--json"], tmp_path).output)
    assert status["engine"]["state"] == "stopped"


def test_config_lists_keys_with_help(tmp_path: Path) -> None:
    r = run(["config"], tmp_path)
    assert r.exit_code == 0
    assert "engine.dtype = 'float32'" in r.output and "reproduces the trainer" in r.output


def test_report_prints_markdown_json_and_explains_a_missing_one(tmp_path: Path) -> None:
    from appliance.schemas import CapabilityReport
    from appliance.store import Store

    store = Store(tmp_path / "appliance.db")
    store.create_run("r1", {})
    store.save_report("r1", 0, CapabilityReport(heldout_pass_at_1=0.5), "# Capability report — iteration 0")
    assert "iteration 0" in run(["report"], tmp_path).output
    assert json.loads(run(["report", "0", "--json"], tmp_path).output)["heldout_pass_at_1"] == 0.5
    r = CliRunner().invoke(main, ["report", "3"], env={"APPLIANCE_HOME": str(tmp_path)})
    assert r.exit_code == 1 and "no report for iteration 3" in r.output


def test_backup_copies_the_store_and_explains_a_bad_destination(tmp_path: Path) -> None:
    r = run(["backup", str(tmp_path / "out" / "copy.db")], tmp_path / "home")
    assert r.exit_code == 0 and (tmp_path / "out" / "copy.db").stat().st_size > 0
    r = CliRunner().invoke(main, ["backup", str(tmp_path / "home" / "appliance.db")],
                           env={"APPLIANCE_HOME": str(tmp_path / "home")})
    assert r.exit_code != 0 and "onto itself" in r.output


# --- stored and task-provided text reaches a real terminal inert ----------------------------------

def in_pty(args: list[str], home: Path, patch=None) -> str:
    """Run the CLI in a forked child whose stdout and stderr are a real pty (so click styles, as on an
    operator's terminal); everything the terminal received."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            # pytest's capture replaced the streams; the child writes to the pty itself
            sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)  # noqa: SIM115
            os.environ["APPLIANCE_HOME"] = str(home)
            if patch is not None:
                patch()
            main(args, standalone_mode=False)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - the parent reads the traceback from the pty
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    out = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the pty
            break
        if not data:
            break
        out += data
    os.waitpid(pid, 0)
    os.close(fd)
    return out.decode(errors="replace")


def fake_validation() -> None:
    """`tasks validate` without sandboxes: the task author's setup output comes back in a failed stage."""
    import appliance.tasks as tasks_pkg
    from appliance.tasks.validate import Stage, Validation
    from hostile import HOSTILE

    tasks_pkg.load_task = lambda path: None
    stages = [Stage(f"setup {HOSTILE}", False, f"setup printed:\n{HOSTILE}\n", 0.1)]
    tasks_pkg.validate_agent_free = lambda settings, spec: Validation(False, stages, f"setup failed: {HOSTILE}")


def hostile_decoder_patch() -> None:
    import appliance.cli.debug as debug
    from hostile import hostile_decoder

    debug._decoder = lambda settings: lambda ids: "".join(hostile_decoder(ids))


@pytest.mark.parametrize(("args", "patch"), [
    (["tasks", "show", "files-1-0"], None),
    (["tasks", "list"], None),
    (["tasks", "validate", "anything"], fake_validation),
    (["rollout", "show", "r-hostile-0"], hostile_decoder_patch),
    (["calls", "r-hostile-0"], None),
    (["report", "--run", "hostile"], None),
    (["status"], None),
    (["tasks", "show", "files-1-0", "--json"], None),
    (["calls", "r-hostile-0", "--json"], None),
])
def test_no_escape_from_stored_text_reaches_the_terminal(args: list[str], patch, tmp_path: Path) -> None:
    from appliance.config import load_settings
    from appliance.store import Store
    from hostile import raw_controls, seed_hostile

    home = tmp_path / "home"
    store = Store(load_settings(environ={"APPLIANCE_HOME": str(home)}).db_path)
    seed_hostile(store)
    store.close()
    out = in_pty(args, home, patch)
    assert "Traceback" not in out, out
    assert raw_controls(out) == [], out
    if "--json" not in args and args[0] != "status":
        assert "\\x1b]52;c;" in out or "\\x1b]0;" in out, out  # shown, not dropped silently
    if args[0] != "status":
        assert "[1 a=b:c]" in out or "hostile" in out


@pytest.mark.parametrize("status", ["done", "failed"])
def test_run_exits_non_zero_when_the_run_failed(status: str, tmp_path: Path, monkeypatch) -> None:
    """A supervisor must see a failed run as a failure: `appliance run` exits 1 and says so, 0 when done."""
    import appliance.app
    from appliance.schemas import RunStatus
    from appliance.store import Store

    def fake_run_appliance(settings, **_):  # the loop's outcome, without engine or sandboxes
        store = Store(settings.db_path)
        store.create_run("r1", {"profile": "cpu"})
        store.set_run_status("r1", RunStatus(status))
        return "r1"

    monkeypatch.setattr(appliance.app, "run_appliance", fake_run_appliance)
    r = CliRunner().invoke(main, ["run", "--headless"], env={"APPLIANCE_HOME": str(tmp_path)})
    assert f"run r1: {status}" in r.output
    if status == "failed":
        assert r.exit_code == 1 and "run r1 failed" in r.output and "appliance run` continues" in r.output
    else:
        assert r.exit_code == 0 and "failed" not in r.output


def test_run_minutes_sets_the_loops_deadline(tmp_path: Path, monkeypatch) -> None:
    import datetime as dt

    import appliance.app
    from appliance.store import Store

    seen = []

    def fake_run_appliance(settings, **_):
        seen.append(settings.loop.deadline)
        Store(settings.db_path).create_run("r1", {"profile": "cpu"})
        return "r1"

    monkeypatch.setattr(appliance.app, "run_appliance", fake_run_appliance)
    before = dt.datetime.now(dt.UTC)
    r = CliRunner().invoke(main, ["run", "--headless", "--minutes", "90"], env={"APPLIANCE_HOME": str(tmp_path)})
    assert r.exit_code == 0, r.output
    assert dt.timedelta(minutes=90) <= seen[0] - before < dt.timedelta(minutes=91)
    r = CliRunner().invoke(main, ["run", "--headless", "--minutes", "0"], env={"APPLIANCE_HOME": str(tmp_path)})
    assert r.exit_code == 2 and "--minutes" in r.output
