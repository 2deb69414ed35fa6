"""Importing tasks from an InterCode-Bash-style benchmark: a query, a setup, a gold command -> a task.

Input: a JSON list (or JSON lines) of entries `{"query": ..., "gold": ..., "setup": ..., "files": {...}}`;
`setup` (bash that builds the workspace) and `files` (path -> text) are optional, and a setup shared by
every entry may be given as well (it runs first). The benchmark's absolute root (`/testbed`) is the
sandbox's /workspace: every occurrence of it as a path (not `/testbed2`, not `a/testbed`) in the query,
the gold command, the setup and the files is rewritten, and a file named under it becomes relative.

Each entry becomes a task (source "user"): the request is the query, the reference solution is the gold
command, and the verifier is `appliance.tasks.importcheck` with the gold command's result embedded: if
the gold command printed something, the task is a question task (`answer = true`) and the agent's answer
must equal that output (whitespace normalised, numbers as numbers); in every case the workspace the agent
leaves must equal the one the gold command left (every path, its kind, its content's hash).

Why the result is computed once, here, and embedded, rather than recomputed by the verifier from a
pristine copy: the verifier runs after the agent over the agent's workspace, so a pristine copy would
have to travel inside that workspace (where the agent can rewrite it, and with it what is expected), or
the verifier would run setup and gold again in a sandbox the agent's files share (and gold commands
name /workspace, the agent's tree). The verifier's text, by contrast, lives in the task on the host and
never enters the agent's sandbox (docs/DESIGN.md, the verdict; `appliance.sandbox`'s threat model): what
is expected is out of the agent's reach. The gold command runs in a scrubbed sandbox exactly as the
reference solution runs in validation (setup, then the command, in /workspace), and its workspace is
recorded by the verifier's own code over the archive the verifier would get (`prepare`, then `judge`),
so nothing differs between recording and judging but the agent. A gold result that is not the same
every time (a date, a random name) is refused by validation, which runs the reference twice.

What can go wrong is named per entry (`Converted.error`: "entry 3: no gold command"); the other entries
are still converted, and nothing already stored changes (the caller admits the converted tasks; `admit`
skips tasks decided before).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from appliance.config import Settings
from appliance.errors import ApplianceError, TaskFormatError
from appliance.sandbox.transfer import pack_files
from appliance.seams import SandboxAPI, SandboxStarter
from appliance.tasks import importcheck
from appliance.tasks.format import Limits, TaskSpec, content_id
from appliance.tasks.validate import _command, _get
from appliance.tasks.verify import ANSWER_MAX_BYTES, judge, passed, prepare, put, starter

FORMATS = ("intercode",)
ROOT = "/testbed"  # InterCode-Bash's file system root
WORKSPACE = "/workspace"
FAMILY = "intercode"
LIMITS = Limits(max_turns=8, command_timeout_s=30.0, setup_timeout_s=30.0)


@dataclass(slots=True)
class Entry:
    """One benchmark entry, paths already mapped to /workspace."""

    index: int  # 1-based position in the input
    query: str
    gold: str
    setup: str = ""
    files: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Expected:
    """What the gold command did: its output (None: it printed nothing) and the workspace it left."""

    answer: str | None
    manifest: dict[str, str]


@dataclass(slots=True)
class Converted:
    """One entry's outcome: a task, or why there is none."""

    index: int
    spec: TaskSpec | None = None
    error: str | None = None


# --- pure conversion -------------------------------------------------------------------------------
def map_root(text: str, root: str = ROOT) -> str:
    """`root` as a path (alone or followed by '/...') becomes /workspace; a longer name or a relative path
    ending in it stays."""
    root = root.rstrip("/") or "/"
    return re.sub(rf"(?<![\w.\-/]){re.escape(root)}(?![\w.\-])", WORKSPACE, text)


def read_entries(path: Path | str) -> list[dict[str, Any] | str]:
    """The raw entries of a JSON list or a JSON-lines file; an entry that is not JSON is its error text."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TaskFormatError(f"cannot read {path}: {e}", "pass a UTF-8 .json or .jsonl file of entries") from None
    try:
        whole = json.loads(text)
    except ValueError as e:
        if text.lstrip().startswith("["):
            raise TaskFormatError(f"{path} is not valid JSON: {e}",
                                  "a list of {\"query\": ..., \"gold\": ...} objects, or one object per line") from None
    else:
        return list(whole) if isinstance(whole, list) else [whole]
    raw: list[dict[str, Any] | str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw.append(json.loads(line))
        except ValueError as e:
            raw.append(f"line {n} is not JSON: {e}")
    return raw


def parse_entry(raw: Any, index: int, *, root: str = ROOT, shared_setup: str = "") -> Entry:
    """One entry checked and mapped; a `TaskFormatError` naming the entry when it cannot be a task."""
    where = f"entry {index}"
    if isinstance(raw, str):
        raise TaskFormatError(f"{where}: {raw}", "write one JSON object per line")
    if not isinstance(raw, dict):
        raise TaskFormatError(f"{where} is a {type(raw).__name__}, not an object",
                              'write {"query": "...", "gold": "..."}')
    unknown = sorted(set(raw) - {"query", "gold", "setup", "files"})
    if unknown:
        raise TaskFormatError(f"{where} has unknown keys: {', '.join(unknown)}",
                              "the keys are query, gold, setup, files")
    for key in ("query", "gold"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise TaskFormatError(f"{where} has no {key}", f'give "{key}" as non-empty text')
    setup = raw.get("setup") or ""
    files = raw.get("files") or {}
    if not isinstance(setup, str):
        raise TaskFormatError(f"{where}: setup must be text (a bash script), got {type(setup).__name__}",
                              'write "setup": "mkdir -p /testbed/dir && ..."')
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise TaskFormatError(f"{where}: files must map paths to text", 'write "files": {"notes.txt": "a\\nb\\n"}')
    mapped: dict[str, str] = {}
    for name, text in files.items():
        rel = map_root(name, root)
        rel = rel[len(WORKSPACE):].lstrip("/") if rel == WORKSPACE or rel.startswith(WORKSPACE + "/") else rel
        p = PurePosixPath(rel)
        if not rel or p.is_absolute() or ".." in p.parts:
            raise TaskFormatError(f"{where}: file {name!r} is not inside {root}",
                                  f"name files relative to the workspace or under {root}/")
        mapped[rel] = map_root(text, root)
    both = "\n".join(s for s in (shared_setup.strip(), setup.strip()) if s)
    return Entry(index, map_root(raw["query"].strip(), root), map_root(raw["gold"].strip(), root),
                 map_root(both, root) + ("\n" if both else ""), mapped)


def verifier_source(expected: Expected) -> str:
    """The Python verifier: importcheck's source and one call with the expected result."""
    data = json.dumps({"answer": expected.answer, "manifest": expected.manifest}, sort_keys=True)
    return Path(importcheck.__file__).read_text() + f"\n\nmain({data!r})\n"


PROBE = Path(importcheck.__file__).read_text() + "\n\nprint(json.dumps(manifest('/workspace')))\n"


def task_of(entry: Entry, *, family: str = FAMILY, difficulty: int = 2, limits: Limits = LIMITS,
            expected: Expected | None = None, origin: str = "") -> TaskSpec:
    """The task for an entry; without `expected`, a draft whose verifier records the workspace (`PROBE`)."""
    answer = expected is not None and expected.answer is not None
    files_key = json.dumps(entry.files, sort_keys=True)
    spec = TaskSpec(id=content_id(family, difficulty, entry.query, entry.gold, entry.setup, files_key),
                    family=family, difficulty=difficulty, instruction=entry.query,
                    verify=PROBE if expected is None else verifier_source(expected), verify_lang="python",
                    solution=entry.gold + "\n", files=dict(entry.files), setup=entry.setup, source="user",
                    limits=dataclasses.replace(limits), answer=answer,
                    meta={"imported": {"format": "intercode", "file": origin, "entry": entry.index}})
    spec.check()
    return spec


def expected_of(index: int, stdout: str, exit_code: int, timed_out: bool, stderr: str,
                manifest_json: str) -> Expected:
    """What the gold command did, from its run and the recorded workspace; an error naming the entry when
    it cannot be a check."""
    where = f"entry {index}"
    if timed_out:
        raise TaskFormatError(f"{where}: the gold command ran past its time limit",
                              "raise --timeout or fix the command")
    if exit_code != 0 and not stdout.strip():
        raise TaskFormatError(f"{where}: the gold command exited {exit_code} and printed nothing: "
                              f"{stderr.strip()[-300:]}", "fix the gold command (or the setup it relies on)")
    if len(stdout.encode()) > ANSWER_MAX_BYTES:
        raise TaskFormatError(f"{where}: the gold command prints {len(stdout.encode())} bytes, more than an "
                              f"answer may hold ({ANSWER_MAX_BYTES})", "ask for something shorter")
    try:
        recorded = json.loads(manifest_json)
    except ValueError:
        raise TaskFormatError(f"{where}: the workspace the gold command left could not be recorded: "
                              f"{manifest_json[-300:]!r}", "keep the workspace small (a few thousand files)") from None
    return Expected(stdout if stdout.strip() else None, recorded)


# --- the gold command, in a sandbox ----------------------------------------------------------------
def record(sb: SandboxAPI, draft: TaskSpec, index: int) -> Expected:
    """Setup and the gold command in a scrubbed sandbox, as validation runs the reference; then the
    workspace recorded by the verifier's own code over the archive the verifier would get."""
    sb.scrub()
    put(sb, pack_files(draft.files))
    sh = sb.shell()
    if draft.setup.strip():
        r = sh.run(_command(draft.setup), timeout=draft.limits.setup_timeout_s)
        if r.exit_code != 0 or r.timed_out:
            why = "ran past its time limit" if r.timed_out else f"exited {r.exit_code}"
            raise TaskFormatError(f"entry {index}: the setup {why}: {(r.stdout + r.stderr).strip()[-300:]}",
                                  "fix the setup script (it runs in /workspace, without the network)")
    gold = sh.run(_command(draft.solution), timeout=draft.limits.command_timeout_s)
    archive, _ = _get(sb)
    prepared, _ = prepare(draft, archive)
    probe = judge(sb, draft, prepared)
    if not passed(probe):
        raise TaskFormatError(f"entry {index}: the workspace the gold command left could not be recorded: "
                              f"{(probe.stdout + probe.stderr).strip()[-300:]}", "keep the workspace small")
    return expected_of(index, gold.stdout, gold.exit_code, gold.timed_out, gold.stderr, probe.stdout)


def convert(settings: Settings, path: Path | str, *, setup: str = "", root: str = ROOT, family: str = FAMILY,
            difficulty: int = 2, limits: Limits = LIMITS, start: SandboxStarter | None = None) -> list[Converted]:
    """Every entry of the file as a task (or the reason it is none), the gold commands run in one sandbox,
    scrubbed between entries (a new one after a sandbox failure)."""
    raws = read_entries(path)
    results: list[Converted] = []
    drafts: list[tuple[Converted, TaskSpec, Entry]] = []
    for i, raw in enumerate(raws, 1):
        try:
            entry = parse_entry(raw, i, root=root, shared_setup=setup)
            drafts.append((Converted(i), task_of(entry, family=family, difficulty=difficulty, limits=limits,
                                                 origin=Path(path).name), entry))
        except TaskFormatError as e:
            results.append(Converted(i, error=e.message))
    start_sandbox = starter(settings, start)
    sb: SandboxAPI | None = None
    try:
        for out, draft, entry in drafts:
            try:
                if sb is None:
                    sb = start_sandbox().__enter__()
                expected = record(sb, draft, entry.index)
                out.spec = task_of(entry, family=family, difficulty=difficulty, limits=limits, expected=expected,
                                   origin=Path(path).name)
            except TaskFormatError as e:
                out.error = e.message
            except ApplianceError as e:  # the sandbox failed: this entry's error, a new sandbox for the next
                out.error = f"entry {entry.index}: infra: {type(e).__name__}: {e.message}"
                _close(sb)
                sb = None
            except Exception as e:  # noqa: BLE001 - whatever an entry's code provokes is that entry's error
                out.error = f"entry {entry.index}: {type(e).__name__}: {e}"[:400]
                _close(sb)
                sb = None
            results.append(out)
    finally:
        _close(sb)
    return sorted(results, key=lambda c: c.index)


def import_file(settings: Settings, path: Path | str, store: Any | None, *, out: Path | None = None,
                start: SandboxStarter | None = None, **options: Any) -> list[dict[str, Any]]:
    """`convert`, then validate: into the store through `admit` (valid, or rejected with the reason; a task
    decided by an earlier import keeps its verdict), or with `out`, each valid task written as a directory
    there. One row per entry: entry, id, ok, answer (a question task), error (which entry, and why)."""
    from appliance.tasks.format import write_task
    from appliance.tasks.validate import admit, validate_many

    converted = convert(settings, path, start=start, **options)
    specs = [c.spec for c in converted if c.spec is not None]
    verdicts: dict[str, str | None] = {}  # id -> None (valid) or the rejection reason
    if store is None:
        for spec, v in zip(specs, validate_many(settings, specs, start=start), strict=True):
            verdicts[spec.id] = None if v.ok else v.reason
            if v.ok and out is not None:
                write_task(spec, out / spec.id)
    else:
        verdicts = {spec.id: None if v.ok else v.reason for spec, v in admit(settings, store, specs, start=start)}
        for spec in specs:
            if spec.id not in verdicts:
                verdicts[spec.id] = store.get_task(spec.id).reject_reason
    rows = []
    for c in converted:
        if c.spec is None:
            rows.append({"entry": c.index, "id": None, "ok": False, "answer": None, "error": c.error})
            continue
        reason = verdicts[c.spec.id]
        rows.append({"entry": c.index, "id": c.spec.id, "ok": reason is None, "answer": c.spec.answer,
                     "error": None if reason is None else f"entry {c.index}: rejected: {reason}"})
    return rows


def _close(sb: SandboxAPI | None) -> None:
    if sb is None:
        return
    try:
        sb.__exit__(None, None, None)
    except ApplianceError:
        pass
