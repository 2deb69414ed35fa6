import json
import os
import subprocess
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.doctor import check_data_dir, check_gpus, check_model, check_podman, run_checks

REPO = Path(__file__).resolve().parents[1]
APPLIANCE = REPO / ".venv" / "bin" / "appliance"


def test_podman_missing_says_how_to_install(settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman here
    c = check_podman(settings)
    assert not c.ok and c.required
    assert "not installed" in c.detail and "scripts/setup" in c.hint


def test_missing_model_points_to_init(settings: Settings) -> None:
    c = check_model(settings)
    assert not c.ok and "appliance init" in c.hint


def test_truncated_weights_are_caught(settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes((10_000).to_bytes(8, "little") + b'{"a"')
    settings.engine.model = folder
    c = check_model(settings)
    assert not c.ok and "does not load" in c.detail


def test_unwritable_data_dir(settings: Settings, tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    settings.home = blocker / "home"
    c = check_data_dir(settings)
    assert not c.ok and "APPLIANCE_HOME" in c.hint


def test_gpu_profile_requires_a_gpu(settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert check_gpus(settings).ok  # cpu profile: a warning at most
    settings.profile = "gpu"
    c = check_gpus(settings)
    assert not c.ok and c.required and "cpu" in c.hint
    # trying the gpu image on a machine without one (doctor --no-gpu): absent, not failed
    [c] = run_checks(settings, [check_gpus], gpu_absent_ok=True)
    assert not c.ok and not c.required and c.detail.startswith("absent: no NVIDIA GPU")


def test_a_crashing_check_is_a_failed_check(settings: Settings) -> None:
    def check_boom(_: Settings):
        raise RuntimeError("boom")

    [c] = run_checks(settings, [check_boom])
    assert c.name == "boom" and not c.ok and "boom" in c.detail


def test_doctor_cli_fails_with_hints_when_not_set_up(tmp_path: Path) -> None:
    env = {**os.environ, "APPLIANCE_HOME": str(tmp_path / "empty")}
    out = subprocess.run([str(APPLIANCE), "doctor", "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 1
    report = json.loads(out.stdout)
    failed = {c["name"]: c for c in report["checks"] if not c["ok"]}
    assert "model" in failed and failed["model"]["hint"]
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_doctor_passes_on_the_set_up_machine() -> None:
    """scripts/setup prepared the default APPLIANCE_HOME; doctor must then say ready."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("APPLIANCE_")}
    out = subprocess.run([str(APPLIANCE), "doctor"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ready" in out.stdout


def test_small_shared_memory_names_the_container_flag(tmp_path: Path, settings: Settings,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from appliance.doctor import check_shared_memory

    assert check_shared_memory(settings).ok  # this machine's /dev/shm
    assert not check_shared_memory(settings, tmp_path / "missing").ok
    monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(64 * 2**20, 0, 62 * 2**20))
    c = check_shared_memory(settings, tmp_path)  # podman's default /dev/shm, as vLLM found it
    assert not c.ok and "62 MB free" in c.detail and "--shm-size" in c.hint
