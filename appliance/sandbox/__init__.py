"""Podman sandboxes: where every rollout, task validation and verifier run executes.

Modules: `podman` (the appliance's own Podman config, CLI runner, label sweep), `image` (the offline
image build), `sandbox` (one sandbox: start, exec, put/get, scrub, stop), `transfer` (workspaces as tar
archives built and sanitized in memory), `shell` (exec results, bounded output, the persistent shell),
`judge` (the verdict channel: a verifier run whose outcome nothing inside can write),
`door` (the only way out: a unix socket to the model proxy), `pool` (the concurrency cap), `check` (the
doctor's end-to-end tests), and `seccomp.json` (the syscall filter every sandbox runs under).

Threat model. Everything inside is untrusted: the agent, and every task's setup, reference solution and
verifier (self-proposed tasks are written by the policy). Protected:
- host files: no host directory is shared with task code. /workspace is a tmpfs inside the sandbox;
  workspaces go in as archives the host built from a task's text or from a host-only directory (read
  with O_NOFOLLOW, links kept as links, special files left out) and come out through tarfile's 'data'
  filter in memory (absolute paths, links out of the tree, devices, FIFOs and sockets dropped and named),
  so the host never reads or writes a directory task code can reach. The host copy of a workspace holds
  directories and regular files only (no link is recreated on the host); the verifier's sandbox gets
  the sanitized archive itself (`Sandbox.copied_out`), so links inside the tree are judged as the agent
  left them. Read-only root, no capabilities,
  no-new-privileges, uid 1000 (not root).
- the host disk and the store: /workspace, /tmp, $HOME and /dev/shm are tmpfs mounts with size caps whose
  pages count against `--memory` (`sandbox.workspace_size`, default a quarter of it).
- network egress: `--network=none`; connect() fails with "Network is unreachable". The only way out is
  the model door (a bind-mounted unix socket relayed to the proxy on loopback), and it reaches one HTTP
  service; the route inside it is selected by a per-rollout secret token that the proxy checks.
- kernel surface: `seccomp.json` refuses new user namespaces (unshare/clone with CLONE_NEWUSER; clone3
  answers ENOSYS so glibc falls back to clone), setns, mounts, keyrings, BPF, io_uring, perf events,
  userfaultfd and module/kexec calls. No configured harness needs any of them (mini-swe-agent and the
  built-in agent run bash and Python); `sandbox.block_user_namespaces = false` turns the profile off.
- stages and tasks: what each may touch, and what it cannot see afterwards:
  | stage | runs where | may write | sees afterwards |
  | --- | --- | --- | --- |
  | setup, agent (rollout) | the rollout's sandbox | its /workspace, /tmp, $HOME, /dev/shm | \
nothing: the sandbox is removed, the workspace copied out sanitized |
  | verifier (rollout) | a new sandbox | nothing in /workspace (read-only to it) | nothing |
  | setup, reference, verifier (validation) | a sandbox scrubbed before every stage | as above | nothing |
  A scrub (`Sandbox.scrub`) kills every process but PID 1 (a reaper that cannot be signalled from
  inside) and the driving shell with `kill -9 -1` (atomic against fork, renamed processes included),
  empties /workspace, /tmp, $HOME, /dev/shm, /dev/mqueue, removes SysV IPC, and checks all of it; a
  sandbox that does not come out clean is discarded (`SandboxNotClean`: the doing of the task or agent
  that ran there, never counted as the machine's failure). The scrub forks nothing, so a bomb holding
  every pid cannot stall it, and a zombie counts as dead. A rollout's sandbox without a door is scrubbed
  the same way (processes only) before its workspace is copied out, so what the agent left running can
  neither change the tree during the copy nor starve the copy of pids. Validation keeps one scrubbed
  sandbox for up to `sandbox.validation_reuse` tasks (1: a new sandbox per task).
- the verifier: never inside the agent's sandbox. It gets the final workspace with protected files put
  back from the task, modules that would shadow the standard library removed, git configuration that
  runs programs taken out, made read-only, and it is started from outside /workspace with a fixed
  environment. It is run the same way in validation and in rollouts.
- the verdict (`judge`): a verifier runs the agent's code by design, as its own uid. Its pass/fail is its
  exit status as read with waitpid by a launcher that is the top process of its own `podman exec`
  (one per sandbox, spared by scrubs);
  launcher and verifier run from execute-only interpreters (mode 0711 copies under
  /usr/local/libexec/appliance), which the kernel makes non-dumpable, so no process of the sandbox may
  ptrace them, read or write their memory or open their descriptors; the launcher's stdout, where the
  verdict is printed, is held by it and the container runtime alone; a partial score comes only from the
  verifier's private fd 3. Code the verifier runs can make it fail, never pass: killing the launcher is
  the rollout's failure, not an infra error.
- fork bombs (`--pids-limit`), memory bombs (`--memory` = `--memory-swap`), CPU (`--cpus`), runaway
  commands (`timeout -s KILL` inside, per command), runaway sandboxes (`--timeout` lifetime: podman kills
  and removes the container even if the appliance died), leaks (labels + sweeps at start-up/shutdown,
  atexit and SIGTERM cleanup), huge output (each stream capped at `output_limit_bytes`).
Not protected:
- kernel or runc escapes: containers share the host kernel (no gVisor/VM); rootful Podman without a
  user namespace, so a container escape is root on the host. `--userns=auto` would add a layer but needs
  /etc/subuid entries; a VM is the answer for hostile code.
- what a verifier's own logic trusts: code it runs may rewrite workspace files (same uid) before the
  verifier reads them, or print anything on a stdout they share; a verifier that trusts such a file or
  text decides by its own logic. A bash verifier that hands fd 3 to the code it runs lets that code
  write a failure's partial score (capped below a pass, never a pass).
- covert channels: a verifier can still tell a reused validation sandbox from a new one by PID numbers,
  uptime or timing, and behave differently; a strict-in-validation, lenient-in-rollouts verifier is
  limited to what it can infer this way (setup's markers and processes are gone). Timing channels
  between sandboxes on one host remain.
- within a rollout, a process that leaves the command's process group (setsid) survives that command's
  time limit (not the sandbox's lifetime), and the sandbox may read what the image contains (nothing
  secret). The proxy's own behaviour (it must check tokens; a token handed into a sandbox is that
  sandbox's to use).
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
