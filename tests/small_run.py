"""The smallest real `appliance run` the slow tests start: the tiny model on the CPU vLLM, the session's
isolated Podman root, one family, two tasks, groups of two, two held-out tasks, one training step."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from appliance.config import Settings

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def small_run_env(sandbox_settings: Settings, home: Path, tiny_model: Path) -> dict[str, str]:
    """APPLIANCE_* variables of that run (merge them over an environment without APPLIANCE_*)."""
    return {
        "APPLIANCE_HOME": str(home),
        "APPLIANCE_PODMAN__GRAPHROOT": str(sandbox_settings.podman_graphroot),
        "APPLIANCE_PODMAN__ADDITIONAL_IMAGE_STORES": json.dumps(
            [str(p) for p in sandbox_settings.podman.additional_image_stores]),
        "APPLIANCE_SANDBOX__MEMORY": "256m",
        "APPLIANCE_ENGINE__MODEL": str(tiny_model),
        "APPLIANCE_ENGINE__PORT": str(free_port()),
        "APPLIANCE_ENGINE__MAX_MODEL_LEN": "2048",
        "APPLIANCE_ENGINE__STARTUP_TIMEOUT_S": "900",  # a loaded 2-core machine can take minutes
        "APPLIANCE_PROXY__PORT": "0",  # a port picked now can be taken by vLLM's own processes before the proxy binds
        "APPLIANCE_LOOP__FAMILIES": '["files"]',
        "APPLIANCE_LOOP__TASKS_PER_ITERATION": "2",
        "APPLIANCE_LOOP__GROUP_SIZE": "2",
        "APPLIANCE_LOOP__HELDOUT_LEVELS": "[1]",
        "APPLIANCE_LOOP__HELDOUT_PER_CELL": "2",
        "APPLIANCE_EVALUATION__DEVSET": "false",  # 66 tasks x k with the tiny model would only add minutes
        "APPLIANCE_LOOP__TRAIN_STEPS": "1",
        "APPLIANCE_LOOP__EXTRA_DRAWS": "0",  # the tiny random model never succeeds: extra draws would only add time
        "APPLIANCE_LOOP__TICK_S": "0.5",
        "APPLIANCE_LOOP__ANALYSIS": "false",
        "APPLIANCE_LOOP__PROPOSE": "0",  # the tiny random model's proposals never parse: 8 long generations for nothing
        "APPLIANCE_HARNESS__MAX_TURNS": "2",
        "APPLIANCE_HARNESS__MAX_TOKENS_PER_CALL": "24",
        "APPLIANCE_TRAINING__MIN_VALID_ROLLOUTS": "2",
        # the curriculum at its smallest: one warm-start demonstration per level, one sample per held-out task
        "APPLIANCE_TRAINING__DEMO_WARMSTART_TASKS": "1",
        "APPLIANCE_TRAINING__DEMO_WARMSTART_LEVELS": "[2]",
        "APPLIANCE_LOOP__WARMSTART_FIRST": "false",  # iteration 1 practises too: every phase is exercised (and killed)
        "APPLIANCE_LOOP__TASKS_PER_FAMILY": "2",
        "APPLIANCE_EVALUATION__SAMPLES_PER_TASK": "1",
    }
