"""The appliance's own Podman config, environment and label sweep."""

from __future__ import annotations

import os
import subprocess
import tomllib

import pytest

from appliance.config import Settings
from appliance.sandbox import LABEL, image_ref, podman_env, sweep, write_podman_config
from appliance.sandbox.podman import OWNER_LABEL, podman, run_root


def test_config_files_select_runtime_and_isolated_root(settings: Settings) -> None:
    write_podman_config(settings)
    conf = tomllib.loads((settings.podman_dir / "containers.conf").read_text())
    storage = tomllib.loads((settings.podman_dir / "storage.conf").read_text())
    assert conf["containers"]["default_ulimits"] == []
    assert conf["containers"]["log_driver"] == "json-file"
    assert conf["engine"]["runtime"] == settings.podman.runtime
    assert conf["engine"]["cgroup_manager"] == "cgroupfs"
    assert conf["engine"]["lock_type"] == "file"
    assert conf["engine"]["tmp_dir"].startswith(str(run_root(settings)))
    assert conf["network"]["network_config_dir"].startswith(str(settings.podman_dir))
    assert storage["storage"]["graphroot"] == str(settings.podman_graphroot)
    assert storage["storage"]["options"]["additionalimagestores"] == []


def test_config_is_idempotent_and_follows_settings(settings: Settings) -> None:
    write_podman_config(settings)
    before = (settings.podman_dir / "containers.conf").stat().st_mtime_ns
    write_podman_config(settings)
    assert (settings.podman_dir / "containers.conf").stat().st_mtime_ns == before
    settings.podman.additional_image_stores = [settings.home / "shared"]
    write_podman_config(settings)
    storage = tomllib.loads((settings.podman_dir / "storage.conf").read_text())
    assert storage["storage"]["options"]["additionalimagestores"] == [str(settings.home / "shared")]


def test_env_points_podman_at_our_files_only(settings: Settings) -> None:
    env = podman_env(settings)
    assert env["CONTAINERS_CONF"] == str(settings.podman_dir / "containers.conf")
    assert env["CONTAINERS_STORAGE_CONF"] == str(settings.podman_dir / "storage.conf")
    assert env["PATH"] == os.environ["PATH"]


@pytest.mark.slow
def test_sweep_removes_labelled_containers(sandbox_settings: Settings) -> None:
    def start(owner: int) -> str:
        return podman(sandbox_settings, "run", "-d", "--pull=never", "--label", f"{LABEL}=1",
                      "--label", f"{OWNER_LABEL}={owner}", image_ref(sandbox_settings), "sleep", "600"
                      ).stdout.decode().strip()

    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan, alive = start(dead.pid), start(os.getpid())
    assert sweep(sandbox_settings, orphans_only=True) == 1
    ids = podman(sandbox_settings, "ps", "-a", "-q", "--no-trunc").stdout.decode().split()
    assert alive in ids and orphan not in ids
    assert sweep(sandbox_settings) == 1
    assert podman(sandbox_settings, "ps", "-a", "-q").stdout.decode().split() == []
