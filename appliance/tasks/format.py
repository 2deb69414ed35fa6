"""The task format: one `TaskSpec` in memory, a directory or a single TOML file on disk, a dict in the store.

See the package docstring (and docs/TASKS.md) for the layout. Workspace files are text (UTF-8); anything
binary or generated belongs in `setup.sh`. Protected paths must be workspace files given here, because
the verifier's context restores them from the task, never from the agent's copy.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import tomli_w

from appliance.errors import TaskFormatError  # defined in errors.py; importable from here as before
from appliance.schemas import Split, Task, TaskStatus

FORMAT_VERSION = 1
SOURCES = ("procedural", "self_proposed", "user")
VERIFY_LANGS = {"bash": "verify.sh", "python": "verify.py"}
TASK_FILE = "task.toml"
# Caps on what a task may ask for: a validator or a rollout is held at most this long per command, and
# an agent gets at most this many turns (nan, inf and 1e12 would hold a sandbox for its whole lifetime).
MAX_TIMEOUT_S = 3600.0
MAX_TURNS = 200
# Where a question task's answer is for the verifier (also in its environment as $ANSWER_FILE).
ANSWER_FILE = "/tmp/answer.txt"


@dataclass(slots=True)
class Limits:
    """What a task may take: turns, and three time limits with one meaning each. Both harnesses and
    validation honour them (a harness setting caps the first two: `harness.max_turns`, `.command_timeout_s`)."""

    max_turns: int = 10
    command_timeout_s: float = 60.0  # one command the agent runs (and the reference solution, in one go)
    setup_timeout_s: float = 60.0  # the task's setup script, before the agent starts
    verifier_timeout_s: float = 60.0  # the verifier on a workspace (what an agent left may make it hang)

    @classmethod
    def of(cls, table: dict[str, Any]) -> Limits:
        """A `[limits]` table. `timeout_s`, format 1's one limit, is read as the command and setup limits."""
        table = dict(table)
        if "timeout_s" in table:
            old = table.pop("timeout_s")
            given = [k for k in ("command_timeout_s", "setup_timeout_s") if k in table]
            if given:
                raise TaskFormatError(f"[limits] has both timeout_s and {', '.join(given)}",
                                      "timeout_s is the older name of command_timeout_s and setup_timeout_s: drop it")
            table |= {"command_timeout_s": old, "setup_timeout_s": old}
        try:
            return cls(**table)
        except TypeError as e:
            raise TaskFormatError(f"bad [limits]: {e}", f"limits has {', '.join(LIMIT_KEYS)}") from None

    def check(self) -> None:
        turns = self.max_turns
        if isinstance(turns, bool) or not isinstance(turns, int) or not 1 <= turns <= MAX_TURNS:
            raise TaskFormatError(f"limits.max_turns = {turns!r} is not a whole number in 1..{MAX_TURNS}",
                                  f"set max_turns to 1..{MAX_TURNS}")
        seconds = {"command_timeout_s": self.command_timeout_s, "setup_timeout_s": self.setup_timeout_s,
                   "verifier_timeout_s": self.verifier_timeout_s}
        for key, value in seconds.items():
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                    or not 0 < value <= MAX_TIMEOUT_S):
                raise TaskFormatError(f"limits.{key} = {value!r} is not a finite number of seconds in "
                                      f"(0, {MAX_TIMEOUT_S:g}]", f"set {key} to at most {MAX_TIMEOUT_S:g} (e.g. 30.0)")


LIMIT_KEYS = ("max_turns", "command_timeout_s", "setup_timeout_s", "verifier_timeout_s")


@dataclass(slots=True)
class TaskSpec:
    id: str
    family: str
    difficulty: int
    instruction: str
    verify: str
    solution: str
    files: dict[str, str] = field(default_factory=dict)  # workspace path -> text
    setup: str = ""  # bash, run in /workspace before the agent starts; no network
    verify_lang: str = "bash"
    protected: list[str] = field(default_factory=list)
    source: str = "procedural"
    limits: Limits = field(default_factory=Limits)
    meta: dict[str, Any] = field(default_factory=dict)  # generator, seed, parameters: provenance only
    format_version: int = FORMAT_VERSION
    # A question task: the agent's final answer (the text it submits with) reaches the verifier as the
    # read-only file ANSWER_FILE; for the reference solution, its standard output is its answer.
    answer: bool = False

    # --- store form ---------------------------------------------------------------------------
    def to_spec(self) -> dict[str, Any]:
        """The plain dict stored as `schemas.Task.spec` (JSON-safe, round-trips through `from_spec`)."""
        return asdict(self)

    def task_row(self, run_id: str | None, split: Split, status: TaskStatus = TaskStatus.PROPOSED, *,
                 iteration: int | None = None, task_id: str | None = None) -> Task:
        """The store's row for this task, the one place a row is made: in a run its id is `<run>.<spec id>`
        (a run's tasks never collide with another run's), outside one the spec's own id."""
        row_id = task_id or (f"{run_id}.{self.id}" if run_id else self.id)
        return Task(row_id, run_id, self.family, self.difficulty, self.source, split, status, self.to_spec(),
                    iteration=iteration)

    @classmethod
    def of(cls, task: Task) -> TaskSpec:
        """The spec of a stored task (checked as `from_spec` checks it)."""
        return cls.from_spec(task.spec)

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> TaskSpec:
        data = dict(spec)
        version = data.get("format_version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise TaskFormatError(
                f"task format_version {version!r} is not supported",
                f"this appliance reads format_version = {FORMAT_VERSION}",
            )
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise TaskFormatError(
                f"unknown task keys: {', '.join(unknown)}", f"valid keys: {', '.join(sorted(known))}"
            )
        missing = [k for k in ("id", "family", "difficulty", "instruction", "verify", "solution") if not data.get(k)]
        if missing:
            raise TaskFormatError(f"task is missing {', '.join(missing)}", "see docs/TASKS.md for the task format")
        limits = data.get("limits") or {}
        if isinstance(limits, dict):
            data["limits"] = Limits.of(limits)
        elif not isinstance(limits, Limits):
            raise TaskFormatError(f"limits must be a table, got {limits!r}",
                                  "write [limits] max_turns = 6, command_timeout_s = 30")
        for key in ("files", "meta"):
            if not isinstance(data.get(key) or {}, dict):
                raise TaskFormatError(f"{key} must be a table, got {type(data[key]).__name__}",
                                      "see docs/TASKS.md for the task format")
        if not isinstance(data.get("protected") or [], list):
            raise TaskFormatError("protected must be a list of workspace paths", 'e.g. protected = ["tests/test_x.py"]')
        for key in ("id", "family", "instruction", "verify", "solution", "setup", "verify_lang", "source"):
            if key in data and not isinstance(data[key], str):
                raise TaskFormatError(f"{key} must be text, got {type(data[key]).__name__}", f"write {key} as a string")
        if not isinstance(data.get("answer", False), bool):
            raise TaskFormatError(f"answer must be true or false, got {data['answer']!r}",
                                  "set answer = true for a task whose answer the agent says instead of writing")
        for k, v in (data.get("files") or {}).items():
            if not isinstance(v, str):
                raise TaskFormatError(f"workspace file {k!r} must be text, got {type(v).__name__}",
                                      "workspace files are UTF-8 text; create binary files in setup.sh")
        data["files"] = {str(k): v for k, v in (data.get("files") or {}).items()}
        data["protected"] = [str(p) for p in data.get("protected") or []]
        data["meta"] = dict(data.get("meta") or {})
        try:
            data["difficulty"] = int(data["difficulty"])
        except (TypeError, ValueError):
            raise TaskFormatError(f"difficulty {data['difficulty']!r} is not a number",
                                  "set difficulty to 1..5") from None
        spec_obj = cls(**data)
        spec_obj.check()
        return spec_obj

    def check(self) -> None:
        """Static checks of the format (no sandbox); raise `TaskFormatError` naming the field."""
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", self.id):
            raise TaskFormatError(f"task id {self.id!r} is not a plain name",
                                  "use letters, digits, '.', '_' and '-' (at most 100)")
        if not 1 <= self.difficulty <= 5:
            raise TaskFormatError(f"difficulty {self.difficulty} is outside 1..5", "set difficulty to 1..5")
        if self.source not in SOURCES:
            raise TaskFormatError(f"source {self.source!r} is unknown", f"use one of: {', '.join(SOURCES)}")
        if self.verify_lang not in VERIFY_LANGS:
            raise TaskFormatError(f"verify_lang {self.verify_lang!r} is unknown",
                                  f"use one of: {', '.join(VERIFY_LANGS)}")
        for path in list(self.files) + self.protected:
            p = PurePosixPath(path)
            if p.is_absolute() or ".." in p.parts or not p.parts:
                raise TaskFormatError(f"workspace path {path!r} leaves the workspace",
                                      "use a relative path without '..'")
            if "\0" in path or path.endswith("/") or any(len(part.encode()) > 255 for part in p.parts):
                raise TaskFormatError(f"workspace path {path!r} is not a file name",
                                      "use a relative file path of plain names (no NUL, no trailing '/')")
        texts = [self.instruction, self.verify, self.solution, self.setup, *self.files.values()]
        if not all(isinstance(t, str) for t in texts):
            raise TaskFormatError("the instruction, the scripts and every workspace file must be text",
                                  "workspace files are UTF-8 text; create binary files in setup.sh")
        if any("\0" in t for t in texts):
            raise TaskFormatError("a script, the instruction or a workspace file contains a NUL byte",
                                  "task files are text; create binary files in setup.sh")
        missing = [p for p in self.protected if p not in self.files]
        if missing:
            raise TaskFormatError(f"protected paths {missing} are not workspace files of the task",
                                  "a protected file must be given in the task so it can be restored")
        self.limits.check()

    def digest(self, path: str) -> str:
        return hashlib.sha256(self.files[path].encode()).hexdigest()


def content_id(family: str, difficulty: int, *parts: str) -> str:
    """A stable id from the content: the same task generated twice gets the same id (idempotent inserts)."""
    h = hashlib.sha256(json.dumps([family, difficulty, *parts]).encode()).hexdigest()[:12]
    return f"{family}-{difficulty}-{h}"


# --- files ---------------------------------------------------------------------------------------
def load_task(path: Path | str) -> TaskSpec:
    """Read a task directory (with task.toml) or a single-file task (one .toml with inline files)."""
    path = Path(path)
    if not path.exists():
        raise TaskFormatError(f"{path} does not exist", "pass a task directory or a .toml task file")
    # The path the user names may itself be a link; links *inside* the task are refused.
    real = path.resolve()
    if real.is_dir():
        return _load_dir(real, default_id=path.name)
    data = _read_toml(real)
    data.setdefault("id", path.stem)
    return TaskSpec.from_spec(_toml_to_spec(data))


def _read_text(path: Path) -> str:
    """A task file as UTF-8 text; a link, a special file or bytes that are not UTF-8 are a clear rejection."""
    _regular(path)
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise TaskFormatError(f"{path} is not UTF-8 text (byte {e.start}, line {line}: {data[e.start:e.start + 1]!r})",
                              "save it as UTF-8; create binary files in setup.sh instead") from None


def _regular(path: Path) -> None:
    """Task files are plain files: a link could carry a host file's content into the sandbox."""
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        raise TaskFormatError(f"{path} is a symbolic link; links in a task directory are not allowed",
                              "replace the link by a copy of the file (or create it in setup.sh)")
    if not stat.S_ISREG(mode):
        raise TaskFormatError(f"{path} is not a regular file", "a task holds plain text files and directories only")


def _read_toml(path: Path) -> dict[str, Any]:
    text = _read_text(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TaskFormatError(f"{path} is not valid TOML: {e}", "fix the syntax at the position named") from None
    except RecursionError:
        raise TaskFormatError(f"{path} nests arrays or tables too deeply to be a task",
                              "a task needs only a few levels of tables; see docs/TASKS.md") from None


def _toml_to_spec(data: dict[str, Any]) -> dict[str, Any]:
    # In TOML the workspace lives under [workspace] (files) and protected paths beside it; in the store
    # form they are flat. Accept both spellings so a spec dumped as TOML loads again.
    data = dict(data)
    ws = data.pop("workspace", None)
    if isinstance(ws, dict):
        data.setdefault("files", ws.get("files", {}))
        if "protected" in ws:
            data.setdefault("protected", ws["protected"])
    return data


def _load_dir(d: Path, default_id: str | None = None) -> TaskSpec:
    toml_path = d / TASK_FILE
    if not toml_path.exists():
        raise TaskFormatError(f"{d} has no {TASK_FILE}", "a task directory holds task.toml, verify.sh and solution.sh")
    data = _toml_to_spec(_read_toml(toml_path))
    data.setdefault("id", default_id or d.name)
    ws = d / "workspace"
    if ws.is_symlink():
        raise TaskFormatError(f"{ws} is a symbolic link; links in a task directory are not allowed",
                              "make workspace/ a plain directory")
    if ws.is_dir():
        files = dict(data.get("files") or {})
        # os.walk never follows a link to a directory; every entry is checked with lstat, so a link
        # (to a host file or directory) or a special file is a rejection, never read through.
        for root, dirs, names in os.walk(ws):
            for name in sorted(dirs):
                if os.path.islink(os.path.join(root, name)):
                    _regular(Path(root) / name)
            for name in sorted(names):
                f = Path(root) / name
                files[f.relative_to(ws).as_posix()] = _read_text(f)
        data["files"] = files
    for name, key in (("setup.sh", "setup"), ("solution.sh", "solution")):
        if os.path.lexists(d / name):
            data[key] = _read_text(d / name)
    for lang, name in VERIFY_LANGS.items():
        if os.path.lexists(d / name):
            data["verify"] = _read_text(d / name)
            data["verify_lang"] = lang
    return TaskSpec.from_spec(data)


def write_task(spec: TaskSpec, target: Path | str) -> Path:
    """Write a task directory (target is a directory) or a single file (target ends in .toml)."""
    target = Path(target)
    if target.suffix == ".toml":
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(dumps_toml(spec))
        return target
    target.mkdir(parents=True, exist_ok=True)
    head = _toml_head(spec)
    head["workspace"] = {"protected": spec.protected} if spec.protected else {}
    if not head["workspace"]:
        del head["workspace"]
    (target / TASK_FILE).write_text(tomli_w.dumps(head, multiline_strings=True))
    for rel, text in spec.files.items():
        p = target / "workspace" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    if spec.setup:
        (target / "setup.sh").write_text(spec.setup)
    (target / VERIFY_LANGS[spec.verify_lang]).write_text(spec.verify)
    (target / "solution.sh").write_text(spec.solution)
    return target


def dumps_toml(spec: TaskSpec) -> str:
    """The single-file form: everything inline, workspace files under [workspace.files]."""
    data = _toml_head(spec)
    data.update(setup=spec.setup, verify_lang=spec.verify_lang, verify=spec.verify, solution=spec.solution)
    data["workspace"] = {"protected": spec.protected, "files": spec.files}
    return tomli_w.dumps(data, multiline_strings=True)


def _toml_head(spec: TaskSpec) -> dict[str, Any]:
    head = {
        "format_version": spec.format_version, "id": spec.id, "family": spec.family,
        "difficulty": spec.difficulty, "source": spec.source, "instruction": spec.instruction,
        "limits": asdict(spec.limits),
    }
    if spec.answer:
        head["answer"] = True
    if spec.meta:
        head["meta"] = spec.meta
    return head
