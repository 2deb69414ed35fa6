"""Harbor and Terminal-Bench 1 task directories, read as they are (docs/TASKS.md "Harbor tasks").

A Harbor task is `task.toml` (schema 1.x, legacy keys read), `instruction.md`, `environment/Dockerfile`,
`tests/test.sh` (its reward in /logs/verifier/reward.txt or reward.json) and `solution/solve.sh`; a
Terminal-Bench 1 task is `task.yaml`, a `Dockerfile` at its root, `run-tests.sh` with `tests/`, and
`solution.sh`. `read_foreign` reads either into a `Foreign` record or refuses the task with the reason
(`TaskFormatError`): what cannot be honoured is never half-run. `to_spec` turns a read task and its built
environment (`appliance.tasks.environment`) into an appliance `TaskSpec`:

- the workspace is the image's workdir (/app by default), copied into /workspace by the task's setup
  (the image links the workdir to /workspace: the root file system is read-only, /workspace is not);
- the verifier carries the tests inside its own source (which never enters the agent's sandbox and
  which no process of the verdict's sandbox can read) and unpacks them, only then, into /tests, a
  directory the judge owns in a sandbox the agent never saw, with /logs fresh beside it; it runs the
  task's test script as the judge and reads the reward file the script wrote (`verdict_script`);
- the reference solution carries solution/ the same way.

The `harbor` package itself is not used: it needs Python 3.12 and a heavy tree; the format is small.
"""

from __future__ import annotations

import base64
import io
import re
import tarfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.errors import TaskFormatError
from appliance.tasks.format import MAX_TIMEOUT_S, Limits, TaskSpec

HARBOR, TB1 = "harbor", "terminal-bench-1"
# Where the verdict's and the solution's files live in a sandbox; the task image links /tests, /logs and
# /solution here (environment.py). /tmp is emptied by every scrub, and the verifier's sandbox is new.
STAGE = "/tmp/harbor"
DIFFICULTY = {"trivial": 1, "easy": 2, "medium": 3, "hard": 4, "expert": 5}
MAX_TESTS_BYTES = 4 << 20  # tests and solution travel inside a script's source
# Keys Harbor's task.toml knows that the appliance reads; others are named in the task's notes.
KNOWN = {"version", "schema_version", "source", "metadata", "verifier", "agent", "environment", "solution"}


@dataclass(slots=True)
class Foreign:
    """A Harbor or Terminal-Bench 1 task as read from its directory."""

    path: Path
    kind: str  # HARBOR | TB1
    id: str
    instruction: str
    dockerfile: str | None  # the environment's Dockerfile text (None: `docker_image` alone)
    context: Path | None  # its build context
    docker_image: str | None
    tests: dict[str, bytes]  # path under /tests -> content
    test_entry: str  # test.sh | run-tests.sh
    solution: dict[str, bytes]  # path under /solution -> content
    solution_entry: str
    limits: Limits
    workdir: str | None  # [environment] workdir; else the Dockerfile's last WORKDIR; else /app
    difficulty: int
    category: str
    tags: list[str] = field(default_factory=list)
    verifier_env: dict[str, str] = field(default_factory=dict)
    solution_env: dict[str, str] = field(default_factory=dict)
    build_timeout_s: float = 600.0
    notes: list[str] = field(default_factory=list)  # what is honoured differently, said in the result


def is_foreign(path: Path) -> bool:
    """A Harbor directory (instruction.md beside task.toml) or a Terminal-Bench 1 one (task.yaml)."""
    return path.is_dir() and ((path / "task.toml").is_file() and (path / "instruction.md").is_file()
                              or (path / "task.yaml").is_file())


def _refuse(path: Path, why: str, hint: str) -> TaskFormatError:
    return TaskFormatError(f"{path.name}: {why}", hint)


def _files(root: Path, task: Path) -> dict[str, bytes]:
    """Every regular file under `root` by relative path; links and special files refuse the task."""
    out: dict[str, bytes] = {}
    if not root.is_dir():
        return out
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            raise _refuse(task, f"{p.relative_to(task)} is a symbolic link",
                          "replace the link by a copy: links in a task could carry a host file in")
        if p.is_file():
            out[p.relative_to(root).as_posix()] = p.read_bytes()
        elif not p.is_dir():
            raise _refuse(task, f"{p.relative_to(task)} is not a regular file", "keep plain files only")
    if sum(len(b) for b in out.values()) > MAX_TESTS_BYTES:
        raise _refuse(task, f"{root.name}/ holds more than {MAX_TESTS_BYTES >> 20} MiB",
                      "keep tests and solutions small; large fixtures belong in the environment's image")
    return out


def _seconds(value: Any, key: str, task: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value:
        raise _refuse(task, f"{key} = {value!r} is not a positive number of seconds", f"set {key} to e.g. 120.0")
    return float(min(value, MAX_TIMEOUT_S))


def _env(table: Any, key: str, task: Path) -> dict[str, str]:
    if table is None:
        return {}
    if not isinstance(table, dict) or not all(isinstance(v, (str, int, float)) for v in table.values()) \
            or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) for k in table):
        raise _refuse(task, f"{key} is not a table of NAME = value", f'write {key} = {{ NAME = "value" }}')
    return {k: str(v) for k, v in table.items()}


def read_foreign(path: Path | str) -> Foreign:
    """Read a Harbor or Terminal-Bench 1 directory, or refuse it with the reason (`TaskFormatError`)."""
    path = Path(path).resolve()
    if (path / "task.yaml").is_file() and not (path / "instruction.md").is_file():
        return _read_tb1(path)
    if not is_foreign(path):
        raise TaskFormatError(f"{path} is neither a Harbor task (task.toml + instruction.md) nor a "
                              "Terminal-Bench 1 task (task.yaml)", "see docs/TASKS.md, 'Harbor tasks'")
    return _read_harbor(path)


def _read_harbor(path: Path) -> Foreign:
    try:
        data = tomllib.loads((path / "task.toml").read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise _refuse(path, f"task.toml is not valid TOML: {e}", "fix the syntax at the position named") from None
    notes = [f"task.toml key {k!r} is not read" for k in sorted(set(data) - KNOWN)]
    version = str(data.get("schema_version", data.get("version", "1.0")))
    if not version.startswith("1"):
        raise _refuse(path, f"task.toml schema {version} is not 1.x", "this appliance reads Harbor's schema 1.x")
    meta = data.get("metadata") or {}
    verifier, agent, env = data.get("verifier") or {}, data.get("agent") or {}, data.get("environment") or {}
    if not all(isinstance(t, dict) for t in (meta, verifier, agent, env)):
        raise _refuse(path, "[metadata], [verifier], [agent] and [environment] must be tables",
                      "see Harbor's task.toml")
    if any((path / "environment" / f"docker-compose.{ext}").exists() for ext in ("yaml", "yml")):
        raise _refuse(path, "its environment is a docker-compose file (several containers)",
                      "the appliance runs one container per task: give environment/Dockerfile alone")
    if int(env.get("gpus", 0) or 0) > 0:
        raise _refuse(path, f"it asks for {env['gpus']} GPU(s) in its container", "sandboxes have no GPU")
    if env.get("os", "linux") != "linux":
        raise _refuse(path, f"environment.os = {env['os']!r}", "sandboxes are Linux containers")
    dockerfile_path = path / "environment" / "Dockerfile"
    dockerfile = dockerfile_path.read_text() if dockerfile_path.is_file() else None
    image = env.get("docker_image")
    if dockerfile is None and not image:
        raise _refuse(path, "it has neither environment/Dockerfile nor environment.docker_image",
                      "give the environment a Dockerfile")
    if env.get("allow_internet", True) is not False or env.get("network_mode", "none") not in ("none", None):
        notes.append("network: the sandbox has none (the task asked for it); what needs it fails")
    for key in ("memory_mb", "memory", "cpus", "storage_mb", "storage"):
        if key in env:
            notes.append(f"environment.{key} = {env[key]!r}: the sandbox's own limits apply (sandbox.*)")
    tests = _files(path / "tests", path)
    if "test.sh" not in tests:
        raise _refuse(path, "it has no tests/test.sh", "Harbor's verifier entry point is tests/test.sh")
    solution = _files(path / "solution", path)
    if "solve.sh" not in solution:
        raise _refuse(path, "it has no solution/solve.sh",
                      "oracle validation needs the reference solution: add solution/solve.sh")
    limits = Limits()
    if "timeout_sec" in verifier:
        limits.verifier_timeout_s = _seconds(verifier["timeout_sec"], "verifier.timeout_sec", path)
    if "timeout_sec" in agent:
        # Harbor's agent limit is the whole episode's; here an episode is bounded by turns x the command limit.
        agent_s = _seconds(agent["timeout_sec"], "agent.timeout_sec", path)
        limits.command_timeout_s = min(limits.command_timeout_s, agent_s)
        notes.append("agent.timeout_sec bounds each command; the episode is bounded by its turns")
    return Foreign(
        path=path, kind=HARBOR, id=_task_id(path.name), instruction=(path / "instruction.md").read_text(),
        dockerfile=dockerfile, context=path / "environment" if dockerfile is not None else None,
        docker_image=str(image) if image else None, tests=tests, test_entry="test.sh", solution=solution,
        solution_entry="solve.sh", limits=limits, workdir=env.get("workdir"),
        difficulty=DIFFICULTY.get(str(meta.get("difficulty", "")).lower(), 3),
        category=str(meta.get("category") or HARBOR), tags=[str(t) for t in meta.get("tags") or []],
        verifier_env=_env(verifier.get("env"), "verifier.env", path),
        solution_env=_env((data.get("solution") or {}).get("env"), "solution.env", path),
        build_timeout_s=_seconds(env.get("build_timeout_sec", 600.0), "environment.build_timeout_sec", path),
        notes=notes)


def _read_tb1(path: Path) -> Foreign:
    import yaml  # type: ignore[import-untyped]  # (a dependency of the serving stack: transformers, vLLM)

    try:
        data = yaml.safe_load((path / "task.yaml").read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise _refuse(path, f"task.yaml is not valid YAML: {e}", "fix the syntax at the position named") from None
    if not isinstance(data, dict) or not isinstance(data.get("instruction"), str):
        raise _refuse(path, "task.yaml has no instruction", "Terminal-Bench 1's task.yaml gives `instruction`")
    compose = path / "docker-compose.yaml"
    if compose.exists():
        services = (yaml.safe_load(compose.read_text()) or {}).get("services") or {}
        if len(services) > 1:
            raise _refuse(path, f"its docker-compose.yaml has {len(services)} services",
                          "the appliance runs one container per task")
    if not (path / "Dockerfile").is_file():
        raise _refuse(path, "it has no Dockerfile", "Terminal-Bench 1 builds the task's Dockerfile")
    if not (path / "run-tests.sh").is_file():
        raise _refuse(path, "it has no run-tests.sh", "Terminal-Bench 1's tests start from run-tests.sh")
    if not (path / "solution.sh").is_file():
        why = "its solution is solution.yaml (keystrokes for a tmux session)" if (path / "solution.yaml").exists() \
            else "it has no solution.sh"
        raise _refuse(path, why, "oracle validation runs solution.sh: give one")
    tests = _files(path / "tests", path)
    tests["run-tests.sh"] = (path / "run-tests.sh").read_bytes()
    limits = Limits()
    if "max_test_timeout_sec" in data:
        limits.verifier_timeout_s = _seconds(data["max_test_timeout_sec"], "max_test_timeout_sec", path)
    notes = []
    if data.get("parser_name", "pytest") != "pytest":
        raise _refuse(path, f"parser_name {data['parser_name']!r}", "the appliance reads pytest's summary only")
    if data.get("run_tests_in_same_shell"):
        notes.append("run_tests_in_same_shell: the tests run in the verdict's own sandbox, never the agent's")
    return Foreign(
        path=path, kind=TB1, id=_task_id(path.name), instruction=data["instruction"],
        dockerfile=(path / "Dockerfile").read_text(), context=path, docker_image=None, tests=tests,
        test_entry="run-tests.sh", solution={"solution.sh": (path / "solution.sh").read_bytes()},
        solution_entry="solution.sh", limits=limits, workdir=None,
        difficulty=DIFFICULTY.get(str(data.get("difficulty", "")).lower(), 3),
        category=str(data.get("category") or TB1), tags=[str(t) for t in data.get("tags") or []], notes=notes)


def _task_id(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", name).lstrip("._-")[:100] or "task"


# --- the appliance's form ---------------------------------------------------------------------------
def _tar_b64(files: dict[str, bytes]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, data in sorted(files.items()):
            info = tarfile.TarInfo(rel)
            info.size, info.mode = len(data), 0o755 if rel.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


def _exports(env: dict[str, str]) -> str:
    return "".join(f"export {k}={_quote(v)}\n" for k, v in sorted(env.items()))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# reward.json: its "reward", or its one value when it holds one (Harbor's named rewards beyond that: unread)
REWARD_JSON = """import json, sys
d = json.load(open(sys.argv[1]))
v = (d.get("reward", next(iter(d.values())) if len(d) == 1 else None)) if isinstance(d, dict) else d
print(float(v))"""


def verdict_script(task: Foreign, workdir: str) -> str:
    """The verifier: the tests unpacked only now, into a /tests the judge owns; the task's test script run
    as the judge from the workdir; a Harbor task's reward read from the /logs/verifier it wrote to (pass at
    1.0, a lower reward is partial credit), a Terminal-Bench 1 task's from pytest's summary line."""
    head = f"""# appliance: {task.kind} task {task.id}'s tests, in the verdict's own sandbox (docs/TASKS.md)
umask 022
mkdir -p {STAGE}/tests {STAGE}/logs/verifier {STAGE}/logs/agent || exit 2
printf %s {_tar_b64(task.tests)} | base64 -d | tar -xz --no-same-owner -C {STAGE}/tests || exit 2
chmod -R a-w {STAGE}/tests
export TEST_DIR=/tests
{_exports(task.verifier_env)}cd {_quote(workdir)} || exit 2
"""
    if task.kind == HARBOR:
        return head + f"""bash /tests/{task.test_entry} </dev/null
__rc=$?
__r=""
if [ -f {STAGE}/logs/verifier/reward.txt ]; then read -r __r < {STAGE}/logs/verifier/reward.txt
elif [ -f {STAGE}/logs/verifier/reward.json ]; then
  __r=$(python3 -I -c {_quote(REWARD_JSON)} {STAGE}/logs/verifier/reward.json 2>/dev/null)
fi
case "$__r" in
  ""|*[!0-9.eE+-]*) echo "[appliance] no numeric reward in /logs/verifier (test.sh exited $__rc)"; exit 1;;
esac
echo "[appliance] reward $__r"
if [ "$(awk -v r="$__r" 'BEGIN {{ print (r + 0 >= 1) ? 1 : 0 }}')" = 1 ]; then exit 0; fi
echo "SCORE=$__r" >&3
exit 1
"""
    return head + f"""bash /tests/{task.test_entry} </dev/null > {STAGE}/logs/verifier/output.txt 2>&1
__rc=$?
tail -c 20000 {STAGE}/logs/verifier/output.txt
__sum=$(grep -E '^=+ .* in [0-9.]+s.* =+$' {STAGE}/logs/verifier/output.txt | tail -n 1)
if [ -z "$__sum" ]; then echo "[appliance] no pytest summary: run-tests.sh exited $__rc"; exit $(( __rc != 0 )); fi
__p=$(printf %s "$__sum" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+'); __p=${{__p:-0}}
__f=$(printf %s "$__sum" | grep -oE '[0-9]+ (failed|errors?)' | grep -oE '[0-9]+' | paste -sd+ | bc)
__f=${{__f:-0}}
echo "[appliance] pytest: $__p passed, $__f failed or errors"
if [ "$__p" -gt 0 ] && [ "$__f" = 0 ]; then exit 0; fi
echo "SCORE=$(awk -v p="$__p" -v f="$__f" 'BEGIN {{ print (p + f) ? p / (p + f) : 0 }}')" >&3
exit 1
"""


def solution_script(task: Foreign, workdir: str) -> str:
    return f"""# appliance: {task.kind} task {task.id}'s reference solution
set -e
mkdir -p {STAGE}/solution
printf %s {_tar_b64(task.solution)} | base64 -d | tar -xz --no-same-owner -C {STAGE}/solution
{_exports(task.solution_env)}cd {_quote(workdir)}
bash /solution/{task.solution_entry} </dev/null
"""


def to_spec(task: Foreign, image: str, workdir: str, notes: list[str]) -> TaskSpec:
    """The appliance's task for a read task whose environment was built as `image` (environment.py): the
    image's workdir copied into /workspace by the setup, the verdict and solution scripts above."""
    spec = TaskSpec(
        id=task.id, family=task.category, difficulty=task.difficulty, instruction=task.instruction,
        verify=verdict_script(task, workdir), solution=solution_script(task, workdir),
        setup=f"cp -R --preserve=mode,timestamps {APP_COPY}/. /workspace/", source="user", limits=task.limits,
        meta={"format": task.kind, "path": str(task.path), "image": image, "workdir": workdir,
              "category": task.category, "tags": task.tags, "notes": [*task.notes, *notes]})
    spec.check()
    return spec


APP_COPY = "/opt/appliance/workdir"  # the image's workdir as built; setup copies it into /workspace


def task_image(spec: TaskSpec) -> dict[str, str]:
    """The sandbox arguments of a task with an environment of its own (`image=`), else none: the
    agent's sandbox, validation's and the verdict's all start from it."""
    image = spec.meta.get("image")
    # only an environment `build_environment` made (its tag names it): a task's metadata picks no other image
    return {"image": image} if isinstance(image, str) and re.fullmatch(r"[\w./-]+-task:[0-9a-f]{16}", image) else {}
