"""Episode shapes of demonstrations: which shape a task gets, the commands each adds, the mistake's mask."""

from __future__ import annotations

from collections import Counter

from appliance.episode_shapes import (
    SHAPES,
    check_candidates,
    check_target,
    edited_files,
    look_command,
    look_commands,
    mistaken,
    named_dirs,
    named_files,
    printed_instead,
    read_command,
    shape_of,
    unseen_names,
)


def test_a_task_keeps_its_shape_and_a_pool_gets_all_of_them() -> None:
    ids = [f"run.files-2-{i:04x}" for i in range(400)]
    assert [shape_of(i) for i in ids] == [shape_of(i) for i in ids]
    counts = Counter(shape_of(i) for i in ids)
    assert set(counts) == set(SHAPES) and min(counts.values()) > 60
    assert {shape_of(i, ("solve",)) for i in ids} == {"solve"}


def test_the_request_names_its_files_and_directories() -> None:
    assert named_files("Where are the .txt files in repo/? Sorted paths into found.txt.") == ["found.txt"]
    assert named_files("There is a bug in mathutils.py: run test_mathutils.py, find it, fix it.") == [
        "mathutils.py", "test_mathutils.py"]
    assert named_files("Bump the version from 1.5 to 2.0 in src/pkg/setup.cfg") == ["src/pkg/setup.cfg"]
    assert named_dirs("Make configs.zip from configs/ so it can be emailed.") == ["configs"]
    assert look_command("Make configs.zip from configs/ so it can be emailed.") == "ls -la configs"
    assert look_command("Count the words of notes.txt") == "ls -la"


def test_checks_rerun_the_test_then_read_the_output_named_last() -> None:
    assert check_candidates("There is a bug in mathutils.py: run test_mathutils.py, find it, fix it.")[0] == (
        "python3 test_mathutils.py")
    assert check_candidates("Where are the .txt files in repo/? Sorted paths into found.txt.") == [
        "head -n 20 found.txt", "ls -la"]
    assert check_candidates("Make configs.zip from configs/ so it can be emailed.")[0] == "ls -la configs.zip"
    assert check_target("head -n 20 found.txt") == "found.txt" and check_target("ls -la") is None


def test_a_slip_misspells_only_the_first_program_and_never_runs_anything() -> None:
    assert mistaken("zip -r -q configs.zip configs\n") == ("zipp -r -q configs.zip configs", "zipp")
    assert mistaken("find repo -name '*.txt' | sort > found.txt") == ("findd repo -name '*.txt'", "findd")
    assert mistaken("sort -u names.txt > out.txt") == ("sortt -u names.txt", "sortt")
    for solution in ("for f in *.log; do rm $f; done", "X=1 env", "echo $(rm -rf /)", "cd repo && git add .",
                     "if true; then :; fi", "python3 -c 'print(1)", "`rm x`", "(cd a; ls)"):
        slip = mistaken(solution)
        assert slip is None or (slip[1] == "cdd" and slip[0] == "cdd repo"), (solution, slip)


def test_names_the_solution_uses_and_the_request_never_gives_are_unseen() -> None:
    request = "Write the last 2 lines of the only .log file in this directory to recent.log."
    assert unseen_names(request, "tail -n 2 worker.log > recent.log\n") == ["worker.log"]
    assert unseen_names("Reverse plan.txt into reversed.txt.", "tac plan.txt > reversed.txt") == []
    assert look_commands(request, deep=False) == ["ls -la"]
    assert look_commands("Tidy logs/ up.", deep=True) == ["ls -la logs", "find logs -maxdepth 3 -not -path '*/.git/*'"]


def test_the_fix_slip_drops_only_a_final_write_after_commands_that_only_read() -> None:
    assert printed_instead("head -n 2 data.txt > top.txt", "the first two lines into top.txt") == (
        "head -n 2 data.txt", "top.txt")
    assert printed_instead("find repo -name '*.csv' | sort > found.txt", "list them in found.txt") == (
        "find repo -name '*.csv' | sort", "found.txt")
    assert printed_instead("git rev-list --count HEAD > count.txt", "count.txt")[0] == "git rev-list --count HEAD"
    assert printed_instead("grep -ic error log > out.txt", "out.txt")[0] == "grep -ic error log"
    for solution in ("sed -i s/a/b/ x > y.txt", "sort -o z x > y.txt", "find . -name x -delete > y.txt",
                     "sort -u a b > all.txt && wc -l < all.txt > y.txt", "grep -c x a >> y.txt",
                     "git commit -m x > y.txt", "rm a; ls > y.txt", "echo $(rm x) > y.txt", "cat <<EOF > y.txt",
                     "awk '{print | \"sh\"}' a > y.txt", "sed -n 's/a/b/w z' x > y.txt"):
        assert printed_instead(solution, "into y.txt") is None, solution
    assert printed_instead("head -n 2 data.txt > top.txt", "a request that names no file") is None


def test_edited_files_are_the_in_place_edits_targets() -> None:
    assert edited_files("sed -i 's|^    return x >= 3$|    return x > 3|' policy.py") == ["policy.py"]
    assert edited_files("sed -i.bak -e 's/a/b/' 'my notes.txt'") == ["my notes.txt"]
    assert edited_files("cat > util.py <<'EOF'\ndef f():\n    pass\nEOF") == ["util.py"]
    # a stream edit into another file, and a file the solution writes from nothing, are not edits in place
    assert edited_files("sed -n 2p a.txt > b.txt\nprintf 'x\\n' > c.txt") == []


def test_an_edit_by_line_number_reads_the_file_numbered() -> None:
    assert read_command("ssh_config", "sed -i '10s/2200/22/' ssh_config") == "cat -n ssh_config"
    assert read_command("run.sh", "sed -i '3,4d' run.sh") == "cat -n run.sh"
    assert read_command("app.env", "sed -i 's|^PORT=1$|PORT=2|' app.env") == "cat app.env"
    assert read_command("my notes.txt", "sed -i '2s/a/b/' other.txt") == "cat 'my notes.txt'"
