"""`appliance tasks import` (issue 30): InterCode-Bash-style entries (a query, a setup, a gold command) become
tasks whose check is the gold command's output and the workspace it leaves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.cli import main
from appliance.config import Settings
from appliance.errors import TaskFormatError
from appliance.sandbox import Sandbox
from appliance.store import Store
from appliance.tasks import importcheck, verify_workspace
from appliance.tasks.importing import (
    Expected,
    expected_of,
    import_file,
    map_root,
    parse_entry,
    read_entries,
    task_of,
    verifier_source,
)

# Written for these tests in InterCode-Bash's style (not taken from its data).
ENTRIES = [
    {"query": "How many .log files are there under /testbed, in all its folders?",
     "gold": "find /testbed -name '*.log' | wc -l"},
    {"query": "Which files under /testbed/src are empty? Print their paths.",
     "gold": "find /testbed/src -type f -empty | sort"},
    {"query": "Delete every .tmp file under /testbed.", "gold": "find /testbed -name '*.tmp' -delete"},
    {"query": "How many lines of /testbed/data/rows.csv mention 'paid'?",
     "setup": "mkdir -p /testbed/data && printf 'id,state\\n1,paid\\n2,open\\n3,paid\\n' > /testbed/data/rows.csv",
     "gold": "grep -c paid /testbed/data/rows.csv"},
]
SETUP = """mkdir -p /testbed/src /testbed/logs/old
printf 'a\\n' > /testbed/logs/app.log; printf 'b\\n' > /testbed/logs/old/app.1.log; : > /testbed/src/blank.py
printf 'x = 1\\n' > /testbed/src/main.py; : > /testbed/src/empty.txt; \
printf t > /testbed/src/cache.tmp; : > /testbed/x.tmp
"""


# --- the conversion, as pure functions ---------------------------------------------------------------
def test_the_benchmark_root_becomes_the_workspace_only_as_a_path() -> None:
    assert map_root("find /testbed -name x") == "find /workspace -name x"
    assert map_root("cat /testbed/a/b.txt; ls /testbed/") == "cat /workspace/a/b.txt; ls /workspace/"
    assert map_root("ls '/testbed'") == "ls '/workspace'"
    for kept in ("/testbed2/a", "a/testbed", "/x/testbed", "/testbed.bak", "testbed"):
        assert map_root(kept) == kept
    assert map_root("ls /data/x", "/data/") == "ls /workspace/x"


def test_an_entry_is_checked_mapped_and_named_when_it_cannot_be_a_task() -> None:
    e = parse_entry({"query": "Count /testbed/a", "gold": "wc -l < /testbed/a", "setup": "echo hi > /testbed/a",
                     "files": {"/testbed/b/c.txt": "see /testbed/a\n", "d.txt": "x"}}, 3, shared_setup="mkdir q")
    assert (e.index, e.query, e.gold) == (3, "Count /workspace/a", "wc -l < /workspace/a")
    assert e.setup == "mkdir q\necho hi > /workspace/a\n"
    assert e.files == {"b/c.txt": "see /workspace/a\n", "d.txt": "x"}
    for raw, says in (({"query": "q"}, "entry 7 has no gold"), ({"gold": "ls", "query": " "}, "entry 7 has no query"),
                      (["q", "g"], "entry 7 is a list"),
                      ({"query": "q", "gold": "g", "answer": 1}, "unknown keys: answer"),
                      ({"query": "q", "gold": "g", "files": {"/etc/passwd": "x"}}, "not inside /testbed"),
                      ({"query": "q", "gold": "g", "files": {"../x": "x"}}, "not inside"),
                      ({"query": "q", "gold": "g", "setup": ["ls"]}, "setup must be text"),
                      ("line 9 is not JSON: ...", "entry 7: line 9 is not JSON")):
        with pytest.raises(TaskFormatError, match=says):
            parse_entry(raw, 7)


def test_entries_are_read_from_a_json_list_or_json_lines(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(ENTRIES, indent=2))
    assert read_entries(tmp_path / "a.json") == ENTRIES
    (tmp_path / "b.jsonl").write_text(json.dumps(ENTRIES[0]) + "\n\n{oops\n" + json.dumps(ENTRIES[1]) + "\n")
    got = read_entries(tmp_path / "b.jsonl")
    assert got[0] == ENTRIES[0] and got[2] == ENTRIES[1] and str(got[1]).startswith("line 3 is not JSON")
    (tmp_path / "c.json").write_text("[{")
    with pytest.raises(TaskFormatError, match="not valid JSON"):
        read_entries(tmp_path / "c.json")


def test_answers_match_with_whitespace_normalised_and_numbers_as_numbers() -> None:
    same = importcheck.same_answer
    assert same("3", "3\n") and same(" 3.0 ", "3\n") and same("There are three.\n3", "3\n")
    assert same("```\n/workspace/a\n/workspace/b\n```", "/workspace/a\n/workspace/b\n")
    assert same("/workspace/a   /workspace/b", "/workspace/a\n/workspace/b\n")
    assert not same("4", "3\n") and not same("", "3\n") \
        and not same("/workspace/b\n/workspace/a", "/workspace/a\n/workspace/b")
    assert not same("3 files", "3\n") and not same("1e400", "3")


def test_the_gold_commands_result_becomes_the_check(tmp_path: Path) -> None:
    assert expected_of(1, "2\n", 0, False, "", '{"a": "dir"}') == Expected("2\n", {"a": "dir"})
    assert expected_of(1, " \n", 0, False, "", "{}").answer is None  # printed nothing: not a question
    assert expected_of(1, "0\n", 1, False, "", "{}").answer == "0\n"  # grep -c finding nothing exits 1
    for args, says in (((1, "", 127, False, "bash: fnd: command not found", "{}"), "exited 127 and printed nothing"),
                       ((1, "", 0, True, "", "{}"), "past its time limit"),
                       ((1, "x" * 70000, 0, False, "", "{}"), "more than an answer may hold"),
                       ((1, "", 0, False, "", "[appliance: output cut]"), "could not be recorded")):
        with pytest.raises(TaskFormatError, match=says):
            expected_of(*args)
    entry = parse_entry(ENTRIES[0], 1)
    spec = task_of(entry, expected=Expected("2\n", {"logs": "dir"}), origin="mine.json")
    assert spec.answer and spec.source == "user" and spec.verify_lang == "python"
    assert spec.solution == "find /workspace -name '*.log' | wc -l\n" and spec.instruction == entry.query
    assert spec.id == task_of(entry, expected=Expected("9\n", {})).id  # the id is the entry's, not its result's
    assert not task_of(parse_entry(ENTRIES[2], 3), expected=Expected(None, {})).answer


def run_verifier(source: str, root: Path, answer: str) -> subprocess.CompletedProcess[str]:
    # The verifier hard-codes /workspace; here it is pointed at a host folder to run it as a plain script.
    (root.parent / "answer.txt").write_text(answer)
    return subprocess.run([sys.executable, "-I", "-c", source.replace('"/workspace"', repr(str(root)))],
                          capture_output=True, text=True,
                          env={"ANSWER_FILE": str(root.parent / "answer.txt"), "PATH": os.environ["PATH"]})


def test_the_verifier_compares_the_answer_and_every_path_and_hash(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "d" / "a.txt").write_text("a\n")
    (ws / "run.sh").write_text("echo\n")
    (ws / "run.sh").chmod(0o755)
    recorded = importcheck.manifest(str(ws))
    assert recorded["d"] == "dir" and recorded["run.sh"].startswith("exec ") and recorded["d/a.txt"].startswith("file ")
    source = verifier_source(Expected("2\n", recorded))
    assert run_verifier(source, ws, "2\n").returncode == 0
    wrong = run_verifier(source, ws, "3")
    assert wrong.returncode == 1 and "the answer ('3')" in wrong.stdout
    (ws / "d" / "a.txt").write_text("b\n")
    (ws / "new.txt").write_text("")
    changed = run_verifier(source, ws, "2")
    assert changed.returncode == 1 and "unexpected in the workspace: new.txt" in changed.stdout
    assert "different in the workspace: d/a.txt" in changed.stdout
    (ws / "new.txt").unlink()
    (ws / "d" / "a.txt").write_text("a\n")
    (ws / "run.sh").chmod(0o644)
    assert "different in the workspace: run.sh" in run_verifier(source, ws, "2").stdout


# --- in real sandboxes -------------------------------------------------------------------------------
def _env(settings: Settings) -> dict[str, str]:
    return {"APPLIANCE_HOME": str(settings.home), "APPLIANCE_PODMAN__GRAPHROOT": str(settings.podman_graphroot),
            "APPLIANCE_PODMAN__ADDITIONAL_IMAGE_STORES": json.dumps(
                [str(p) for p in settings.podman.additional_image_stores])}


@pytest.mark.slow  # real Podman
def test_imported_entries_validate_and_are_solved_by_their_gold_command(sandbox_settings: Settings,
                                                                        tmp_path: Path) -> None:
    data = tmp_path / "bench.json"
    data.write_text(json.dumps(ENTRIES + [{"query": "Say hi.", "gold": "ech hi"}]))
    (tmp_path / "setup.sh").write_text(SETUP)
    r = CliRunner().invoke(main, ["tasks", "import", str(data), "--setup", str(tmp_path / "setup.sh"), "--json"],
                           env=_env(sandbox_settings), catch_exceptions=False)
    rows = json.loads(r.output)
    assert r.exit_code == 1 and [row["ok"] for row in rows] == [True, True, True, True, False], rows
    assert [row["answer"] for row in rows[:4]] == [True, True, False, True]
    assert rows[4]["error"].startswith("entry 5: the gold command exited 127 and printed nothing")

    store = Store(sandbox_settings.db_path)
    try:
        count = store.get_task(rows[0]["id"])
        assert count.status == "valid" and count.source == "user"
        spec = count.spec
        # re-importing changes nothing stored: every task keeps its verdict
        again = import_file(sandbox_settings, data, store, setup=SETUP)
        assert [row["ok"] for row in again] == [True, True, True, True, False]
    finally:
        store.close()

    # the count question: the gold command's answer passes, a wrong one fails, and so does a workspace changed
    from appliance.tasks import TaskSpec
    from appliance.tasks.validate import _command, _get

    task = TaskSpec.from_spec(spec)
    with Sandbox.start(sandbox_settings) as sb:
        from appliance.sandbox.transfer import pack_files
        from appliance.tasks.verify import put

        put(sb, pack_files(task.files))
        assert sb.shell().run(_command(task.setup), timeout=30).exit_code == 0
        gold = sb.shell().run(_command(task.solution), timeout=30)
        solved, _ = _get(sb)
        sb.shell().run(_command("rm /workspace/x.tmp"), timeout=30)
        touched, _ = _get(sb)
    assert gold.stdout.strip() == "2"
    assert verify_workspace(sandbox_settings, task, "", archive=solved, answer="2").passed
    wrong = verify_workspace(sandbox_settings, task, "", archive=solved, answer="3")
    assert not wrong.passed and "is not what the task asked for" in wrong.output
    moved = verify_workspace(sandbox_settings, task, "", archive=touched, answer="2")
    assert not moved.passed and "missing in the workspace: x.tmp" in moved.output
