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
  filter in memory (absolute paths, links out of the tree (followed through its other links as the kernel
  would: test_transfer.py), sparse members, devices, FIFOs and sockets dropped and named),
  so the host never reads or writes a directory task code can reach. The host copy of a workspace holds
  directories and regular files only (no link is recreated on the host); the verifier's sandbox gets
  the sanitized archive itself (`Sandbox.copied_out`), so links inside the tree are judged as the agent
  left them. Read-only root, no capabilities,
  no-new-privileges, uid 1000 (not root).
- the host disk and the store: /workspace, /tmp, $HOME and /dev/shm are tmpfs mounts with size caps whose
  pages count against `--memory` (`sandbox.workspace_size`, default a quarter of it).
- network egress: `--network=none`; connect() fails with "Network is unreachable". The only way out is
  the model door (a bind-mounted unix socket relayed to the proxy on loopback), and it reaches one HTTP
  service; the route inside it is selected by a per-rollout secret token that the proxy checks, and a
  request head past 64 KiB or 100 headers is answered 431 unread (`proxy.server.CappedHttp`, test_guards.py).
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
  the same way (processes only, from a control shell opened before any task code ran) before its workspace
  is copied out, so what the agent left running can
  neither change the tree during the copy nor starve the copy of pids. Validation keeps one scrubbed
  sandbox for up to `sandbox.validation_reuse` tasks (1: a new sandbox per task).
- the verifier: never inside the agent's sandbox. It gets the final workspace with protected files put
  back from the task, modules that would shadow the standard library removed, git configuration that
  runs programs taken out, made read-only, and it is started from outside /workspace with a fixed
  environment. It is run the same way in validation and in rollouts.
- the verdict (`judge`): a verifier runs the agent's code by design, as the agent's uid (1000) while the
  verifier is the judge's (1001). Its pass/fail is
  its exit status as read with waitpid by a launcher that is the top process of its own `podman exec --user
  0 --privileged` (one per sandbox, spared by scrubs): root, which narrows itself at once to the
  capabilities KILL, SETUID, SETGID, CHOWN and DAC_READ_SEARCH (the container grants none: uids 1000 and
  1001 have none and cannot gain any), so no process of the sandbox may signal, ptrace or inspect it. The
  verifier is its child, dropped to the judge's uid and run from an execute-only interpreter (mode 0711
  copies under /usr/local/libexec/appliance), which the kernel makes non-dumpable: no process of the
  sandbox may ptrace it, read its memory or open its descriptors. The code under test runs as the agent
  when the verifier asks the launcher on fd 5 (`appliance_check.run_as_agent`), in a child of the launcher
  whose only outputs are its stdout, stderr and exit status and which ends with every process of that uid.
  Each attack on the verdict, what stops it, and the test that tries it
  (tests/practice/test_verdict_attacks.py unless named):
  | attack | what stops it | test |
  | --- | --- | --- |
  | exit 0 from the code under test (`os._exit(0)` in a pyfix module), or a result line printed before \
it (an edit task's module) | the families judge the values a child printed in a frame marked by a per-run \
nonce (`appliance_check` in the image), never the exit status of a process that imported the agent's \
code nor text it printed; the expectations stay in the verifier | \
test_exiting_0_from_the_code_under_test_passes_no_pyfix_task, test_a_forged_result_line_passes_no_edit_task |
  | read the verifier's source (/proc/PID/cmdline, environ) | the source is a sealed memfd on fd 4, read \
and closed by the interpreter's bootstrap before anything runs; composite parts get theirs on a pipe | \
test_the_code_under_test_cannot_read_the_verifiers_source |
  | stop or kill the launcher | another uid than the code under test; a launcher silent while its \
sandbox lives is the agent's `verifier_timeout`, a stopped or killed verifier the rollout's failure | \
test_stopping_the_launcher_is_the_agents_failure_not_an_infra_error, test_forged_verdict.py |
  | kill or stop the verifier from the code under test (it shared the verifier's uid) | the verifier \
runs as the judge (uid 1001), the code under test as the agent (uid 1000) through `run_as_agent`: no \
signal crosses uids; the families run workspace code only that way | \
test_agent_uid.py::test_the_code_under_test_cannot_kill_or_stop_its_verifier |
  | rewrite a file the verifier reads while it runs (the agent owned the read-only workspace: chmod, \
write) | the launcher hands the workspace to the judge for the run (owner judge, group agent, \
read-only, the agent's permissions copied to the group) and back after it | \
test_agent_uid.py::test_the_code_under_test_cannot_rewrite_what_its_verifier_reads, \
test_a_planted_module_passes_no_part_of_a_composite |
  | write a partial score through an inherited fd 3 (os.system, a bash verifier's child) | fd 3 is a \
datagram socket whose messages carry the sender's pid (SCM_CREDENTIALS): only the verifier's own writes \
count; the Python bootstrap also makes it close-on-exec | \
test_the_score_descriptor_counts_only_the_verifiers_own_writes |
  | forge the verdict: another process's memory, a shared stdout, the shell's sentinel | non-dumpable \
launcher and verifier; the verdict on a stdout only the launcher and the runtime hold | \
test_forged_verdict.py |
  | hide git state: index entries marked assume-unchanged or skip-worktree; ignore rules the task did not \
set (an untracked .gitignore, info/exclude); a `.git` gitdir: file | `tasks.gitsafe` clears the \
flags, empties info/exclude, removes untracked .gitignore and a non-directory .git, and records them; \
state-hiding keys denied, replace refs off | \
test_a_flag_in_the_index_hides_no_change_from_the_verifier, \
test_gitsafe.py::test_ignore_rules_and_a_gitdir_file_hide_nothing_from_the_verifier |
  | run a program in the verifier through git: configuration, hooks, and layouts that hid them (a linked \
config or HEAD, a hard-linked config, a commondir) | `tasks.gitsafe`: allowlisted configuration, hooks \
dropped, a repository found by a HEAD of any kind, non-regular config and HEAD replaced, commondir and \
grafts removed, all recorded | tests/tasks/test_gitsafe.py |
  | shadow a module the verifier imports | planted standard-library names removed before the verdict | \
test_hostile_agent.py |
  | drive the appliance's shell: write commands into its pipe (/proc/<shell>/fd/10), or redefine in the \
agent's shell what the scrub before the copy out relies on (`kill`, its variables) | the driving shells \
run from the execute-only bash (non-dumpable: their descriptors are unreachable); a sandbox that will be \
copied out is scrubbed from a control shell opened before any task code runs, a sandbox with a model door \
too (its relay spared) | tests/sandbox/test_sandbox.py, test_door_scrub.py |
  | take the host: a sparse file (`truncate -s 3G`), many small files, a deep tree | the copy out \
archives sparse files as their blocks and refuses them (never expanded), reads the archive as a stream \
and counts logical bytes against \
the workspace's cap (files past it left out and named), members capped at 20,000; a task's files \
measured in tmpfs pages; tampering records capped | \
test_a_sparse_file_costs_the_host_no_memory_and_is_recorded, \
test_a_deep_tree_makes_a_bounded_tampering_record, test_validate.py |
  | a self-proposed verifier that pays partial credit for any behaviour | a self-proposed task's failure \
scores 0 (`tasks.verify.score_of`); one that silences its validation (stops its launcher, the shell, \
everything it may signal) is rejected once, never infra | test_a_self_proposed_verifier_pays_no_partial_credit, \
test_silenced_validation.py |
  | a Harbor task's reward forged by the agent: a reward file written during the episode (read-only), a \
process left behind that rewrites it after the tests, a module planted in the workdir that the tests' child \
imports | the tests run in the verdict's own sandbox from the \
task's image (never the agent's, as Harbor does), the tests unpacked from the verifier's own source only \
then, into a /tests and a fresh /logs the judge owns; planted modules, sitecustomize and conftest.py \
removed (`tasks.harbor`, docs/TASKS.md "Harbor and Terminal-Bench 1 tasks") | \
tests/tasks/test_harbor_sandbox.py::test_a_hostile_agent_raises_no_harbor_reward |
  Code the verifier runs can make it fail, never pass.
- fork bombs (`--pids-limit`), memory bombs (`--memory` = `--memory-swap`), CPU (`--cpus`), runaway
  commands (`timeout -s KILL` inside, per command), runaway sandboxes (`--timeout` lifetime: podman kills
  and removes the container even if the appliance died), leaks (labels + sweeps at start-up/shutdown,
  atexit and SIGTERM cleanup), huge output (each stream capped at `output_limit_bytes`).
Not protected:
- kernel or runc escapes: containers share the host kernel (no gVisor/VM); rootful Podman without a
  user namespace, so a container escape is root on the host. `--userns=auto` would add a layer but needs
  /etc/subuid entries; a VM is the answer for hostile code.
- what a verifier's own logic trusts: code it runs itself (subprocess, os.system) runs as the judge and
  may kill or stop it, or chmod and rewrite the judge's workspace; code it runs as the agent may write
  where the agent's uid may (/tmp) and print anything; a verifier that trusts such a file or text decides
  by its own logic; so does one that trusts the exit status of the agent's code (an exit passes it; the
  families judge values instead); a Harbor task's tests run the agent's code in their own process as
  the judge, as Harbor does, so that code may write the reward file itself. The host's driving shell is
  the agent's uid: code under test can kill it (the sandbox is then discarded, never judged by it).
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
