"""Podman sandboxes: where every rollout, task validation and verifier run executes.

Modules: `podman` (the appliance's own Podman config, CLI runner, label sweep), `image` (the offline
image build), `sandbox` (one sandbox: start, exec, put/get, stop), `shell` (exec results, bounded
output, the persistent shell), `door` (the only way out: a unix socket to the model proxy), `pool` (the
concurrency cap), `check` (the doctor's end-to-end test).

Threat model. The agent inside is untrusted code that may be buggy or adversarial. Protected:
- network egress: `--network=none`; connect() fails with "Network is unreachable". The only way out is
  the model door (a bind-mounted unix socket relayed to the proxy on loopback), and it reaches one HTTP
  service; the route inside it is selected by a per-rollout secret token that the proxy checks.
- host files: read-only root, no capabilities, no-new-privileges, uid 1000 (not root), the only writable
  host path is the sandbox's own workspace; put/get stream tar archives through `podman exec` so paths
  resolve inside the container, and `get` extracts with tarfile's 'data' filter (no absolute paths, no
  links out of the target, no devices), so symlinks the agent plants cannot reach host files.
- other sandboxes: each has its own network namespace (none), workspace, socket directory and token.
- the verifier: never inside the agent's sandbox; it runs afterwards in a fresh sandbox (callers' job,
  made possible by put/get of the workspace).
- fork bombs (`--pids-limit`), memory bombs and tmpfs filling (`--memory` = `--memory-swap`, tmpfs
  pages count against it), CPU (`--cpus`), runaway commands (`timeout -s KILL` inside, per command),
  runaway sandboxes (`--timeout` lifetime: podman kills and removes the container even if the
  appliance died), leaks (labels + sweeps at start-up/shutdown, atexit and SIGTERM cleanup), huge
  output (each stream capped at `output_limit_bytes`, the rest counted and dropped).
Not protected:
- kernel or runc escapes: containers share the host kernel (no gVisor/VM); rootful Podman without a
  user namespace, so a container escape is root on the host. `--userns=auto` would add a layer but needs
  /etc/subuid entries; a VM is the answer for hostile code.
- disk: the workspace is a host directory with no quota; a sandbox can fill the disk until its lifetime
  ends. Use a separate filesystem for APPLIANCE_HOME if that matters.
- a process that leaves the command's process group (setsid) survives that command's time limit (not
  the sandbox's lifetime), and the sandbox may read what the image contains (nothing secret).
- covert timing channels between sandboxes on one host, and the proxy's own behaviour (it must check
  tokens; a token handed into a sandbox is that sandbox's to use).
"""

from appliance.sandbox.check import check_podman
from appliance.sandbox.door import DOOR_PORT, ModelDoor
from appliance.sandbox.image import build_image, image_exists, image_ref
from appliance.sandbox.podman import LABEL, podman_env, sweep, write_podman_config
from appliance.sandbox.pool import SandboxPool
from appliance.sandbox.sandbox import ExecResult, Sandbox, Shell

__all__ = [
    "DOOR_PORT", "LABEL", "ExecResult", "ModelDoor", "Sandbox", "SandboxPool", "Shell", "build_image",
    "check_podman", "image_exists", "image_ref", "podman_env", "sweep", "write_podman_config",
]
