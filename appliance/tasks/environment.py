"""A foreign task's environment: its Dockerfile built with Podman once, cached by content, run hardened.

The task's Dockerfile is built on top of the appliance's own sandbox image, so the container it makes
runs under the sandbox's hardening with the judge, the verdict launcher and `appliance_check` inside:

- its FROM must be a base the appliance can serve offline: `debian:bookworm` (and `-slim`, `12`),
  `python:*-bookworm` (and `-slim-bookworm`) and Terminal-Bench 1's `t-bench/python-3-13`, all served by
  the appliance's Debian 12 image (its python3 is 3.11, whatever version the tag names): the result
  says so. Any other base is refused: this host reaches no container registry;
- the build has no network (`--network=none`): a RUN that downloads fails it, and a failed build is an
  excluded task with the build's last lines, not a crash (remembered by content, not retried);
- after the task's own lines the image moves the workdir's contents aside (the task's setup copies them
  into /workspace, the sandbox's tmpfs: the root file system is read-only) and links the workdir to
  /workspace, and /tests, /logs and /solution into /tmp/harbor (the judge fills them in the verdict's
  sandbox only), then drops to the agent's user with no entrypoint of its own.

The tag is a hash of the derived Containerfile and the build context, so the same task builds once.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from appliance.config import Settings
from appliance.errors import TaskFormatError
from appliance.sandbox import build_image, image_exists, image_ref
from appliance.sandbox.podman import podman_env, write_podman_config
from appliance.tasks.harbor import APP_COPY, STAGE, Foreign, _files

SERVED = (
    re.compile(r"debian:(bookworm|12)(-slim)?"),
    re.compile(r"python:([0-9.]+-)?(slim-)?bookworm"),
    re.compile(r"ghcr\.io/laude-institute/t-bench/python-3-13(:[\w.-]+)?"),
)
FORBIDDEN_WORKDIRS = ("/", "/workspace", "/tmp", "/opt", "/opt/appliance", "/usr", "/etc", "/home")


@dataclass(slots=True)
class Environment:
    image: str
    workdir: str
    notes: list[str] = field(default_factory=list)


def served(base: str) -> bool:
    name = re.sub(r"^(docker\.io/)?(library/)?", "", base.split("@", 1)[0])
    return any(p.fullmatch(name) for p in SERVED)


def _logical_lines(text: str) -> list[str]:
    """Dockerfile instructions, continuation lines joined, comments and blank lines left out."""
    out, cur = [], ""
    for raw in text.splitlines():
        if not cur and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.rstrip().endswith("\\"):
            cur += raw.rstrip() + "\n"  # kept as written: the instruction goes into the derived file
            continue
        out.append(cur + raw)
        cur = ""
    if cur:
        out.append(cur)
    return out


def derive(task: Foreign, base_ref: str) -> tuple[str, str, str]:
    """(Containerfile, workdir, the base it named) for a task; refuses what cannot be honoured."""
    lines = _logical_lines(task.dockerfile) if task.dockerfile is not None else [f"FROM {task.docker_image}"]
    froms = [line for line in lines if line.split(None, 1)[0].upper() == "FROM"]
    if len(froms) != 1 or lines[0] is not froms[0]:
        raise TaskFormatError(f"{task.id}: its Dockerfile has {len(froms)} FROM lines (multi-stage or ARG first)",
                              "give one FROM line first: a multi-stage build is not honoured")
    words = froms[0].split()[1:]
    base = next((w for w in words if not w.startswith("--")), "")
    if "$" in base or not served(base):
        raise TaskFormatError(
            f"{task.id}: base image {base!r} cannot be served offline",
            "bases served by the appliance's Debian 12 image: debian:bookworm, python:*-bookworm "
            "(and -slim); this host reaches no container registry")
    body = lines[1:]
    for line in body:
        word = line.split(None, 1)[0].upper()
        if re.search(r"<<-?\s*['\"]?\w+", line):
            raise TaskFormatError(f"{task.id}: its Dockerfile uses a heredoc", "heredocs are not honoured: use printf")
        if word in ("VOLUME", "ONBUILD"):
            raise TaskFormatError(f"{task.id}: its Dockerfile uses {word}", f"{word} is not honoured: drop it")
    workdir = task.workdir
    if workdir is None:
        wd = [line.split(None, 1)[1].strip() for line in body if line.split(None, 1)[0].upper() == "WORKDIR"]
        workdir = wd[-1] if wd and wd[-1].startswith("/") else "/app"
    workdir = str(PurePosixPath(workdir))
    if "$" in workdir or not workdir.startswith("/") or workdir in FORBIDDEN_WORKDIRS \
            or not re.fullmatch(r"[A-Za-z0-9_./-]+", workdir):
        raise TaskFormatError(f"{task.id}: workdir {workdir!r} cannot be the agent's workspace",
                              "use a directory of its own, e.g. /app")
    tail = f"""USER root
RUN set -e; d={workdir}; mkdir -p {PurePosixPath(APP_COPY).parent}; \\
    if [ -d "$d" ]; then mv "$d" {APP_COPY}; else mkdir {APP_COPY}; fi; \\
    chmod -R a+rX {APP_COPY}; mkdir -p "$(dirname "$d")"; ln -s /workspace "$d"; \\
    for x in tests logs solution; do rm -rf "/$x"; ln -s {STAGE}/$x "/$x"; done
ENV PATH=$PATH:/usr/local/bin:/usr/bin:/bin
ENTRYPOINT []
CMD ["/bin/bash"]
USER agent
WORKDIR /workspace
"""
    text = f"# derived by appliance from {task.kind} task {task.id}\nFROM {base_ref}\nUSER root\n" \
        + "\n".join(body) + "\n" + tail
    return text, workdir, base


def _failed_marker(settings: Settings, tag: str) -> Path:
    return settings.home / "cache" / "task-images" / f"{tag}.failed"


def build_environment(settings: Settings, task: Foreign, log: Callable[[str], None] = print) -> Environment:
    """The task's image, built once per content; a build that fails refuses the task (`TaskFormatError`)."""
    text, workdir, base = derive(task, image_ref(settings))  # refused before anything is built
    context = _files(task.context, task.path) if task.context is not None else {}
    h = hashlib.sha256(text.encode())
    for rel, data in sorted(context.items()):
        h.update(hashlib.sha256(rel.encode() + b"\0" + data).digest())
    tag = h.hexdigest()[:16]
    ref = f"{settings.sandbox.image}-task:{tag}"
    notes = [f"base {base} served by the appliance's Debian 12 image (python3 3.11)"]
    failed = _failed_marker(settings, tag)
    if failed.exists():
        raise TaskFormatError(f"{task.id}: its environment did not build: {failed.read_text()}",
                              "fix the Dockerfile (the build has no network), then import again")
    write_podman_config(settings)
    if image_exists(settings, ref):
        return Environment(ref, workdir, notes)
    build_image(settings, log)  # the sandbox image it derives from (a no-op when built)
    log(f"building the environment of {task.id} ({ref})")
    with tempfile.TemporaryDirectory(prefix="task-env-") as tmp:
        ctx = Path(tmp) / "context"
        ctx.mkdir()
        for rel, data in context.items():
            (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
            (ctx / rel).write_bytes(data)
        (Path(tmp) / "Containerfile").write_text(text)
        try:
            proc = subprocess.run(["podman", "build", "--pull=never", "--network=none", "--layers=false", "-t", ref,
                                   "-f", str(Path(tmp) / "Containerfile"), str(ctx)],
                                  env=podman_env(settings), capture_output=True, text=True,
                                  timeout=task.build_timeout_s)
        except subprocess.TimeoutExpired:
            raise TaskFormatError(f"{task.id}: its environment's build ran past {task.build_timeout_s:g} s",
                                  "raise environment.build_timeout_sec or make the build smaller") from None
    if proc.returncode != 0:
        err = "\n".join(proc.stderr.strip().splitlines()[-6:])[-1200:]
        if "STEP" in proc.stderr:  # the task's own lines failed (not podman): remembered for this content
            failed.parent.mkdir(parents=True, exist_ok=True)
            failed.write_text(err)
        raise TaskFormatError(f"{task.id}: its environment did not build: {err}",
                              "fix the Dockerfile (the build has no network), then import again")
    return Environment(ref, workdir, notes)
