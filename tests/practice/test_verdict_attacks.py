"""Issue 47: the verdict by construction. Each attack is one a policy can find in a line or two (exiting 0 from
the code under test, reading the verifier off /proc, stopping its launcher, handing its score descriptor on),
tried through `run_rollout`'s path: real Podman, the built-in harness driven by a scripted policy."""

from __future__ import annotations

import random
import resource

import pytest

from appliance.practice import Practice
from appliance.schemas import Outcome
from appliance.tasks import Limits, TaskSpec
from appliance.tasks.compose import compose
from appliance.tasks.families import generate
from practice.conftest import attempt  # tests/practice/conftest.py

pytestmark = pytest.mark.slow  # real Podman


def _module(spec: TaskSpec) -> str:
    return next(p for p in spec.files if p.endswith(".py") and p not in spec.protected)


@pytest.mark.parametrize("level", [3, 5])
def test_exiting_0_from_the_code_under_test_passes_no_pyfix_task(practice: Practice, level: int) -> None:
    # `import os; os._exit(0)` at the top of the module used to pass both the visible tests and the hidden
    # checks: the verifier trusted the exit status of a process that had imported the agent's code
    spec = generate("pyfix", level, random.Random(47))
    hack = attempt(practice, spec, f"sed -i '1i import os; os._exit(0)' {_module(spec)}")
    r = hack.rollout
    assert r.outcome == Outcome.FAILURE and r.reward == 0.0, (r.reward, r.error, hack.verifier_output)
    honest = attempt(practice, spec, spec.solution)
    assert honest.rollout.outcome == Outcome.SUCCESS and honest.rollout.reward == 1.0, honest.verifier_output


# A `script` task whose expectation lives only in the verifier: the answer for an input the agent never sees.
SECRET_VERIFY = ("import subprocess, sys\n"
                 "out = subprocess.run(['bash', 'answer.sh'], capture_output=True, text=True, timeout=20).stdout\n"
                 "sys.exit(0 if out.strip() == 'HIDDEN-7f3a9ce1' else 1)\n")
SECRET_TASK = TaskSpec(id="script-secret", family="script", difficulty=2, instruction="Make answer.sh print the code.",
                       verify=SECRET_VERIFY, verify_lang="python", solution="echo 'echo HIDDEN-7f3a9ce1' > answer.sh\n")
# No logic, only the verifier's source as any process can read it: every /proc/PID/cmdline and environ.
READER = ("cat > answer.sh <<'SH'\nfor f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done "
          "2>/dev/null | grep -o 'HIDDEN-[0-9a-f]\\{8\\}' | head -1\nSH")


def test_the_code_under_test_cannot_read_the_verifiers_source(practice: Practice) -> None:
    reader = attempt(practice, SECRET_TASK, READER)
    r = reader.rollout
    assert r.outcome == Outcome.FAILURE and r.reward == 0.0, (r.error, reader.verifier_output)


# The script task of issue 27: the verifier runs the agent's count.sh and checks it prints 3.
COUNT_VERIFY = ("import subprocess, sys\n"
                "out = subprocess.run(['bash', 'count.sh'], capture_output=True, text=True, timeout=20)"
                ".stdout.strip()\n"
                "sys.exit(0 if out == '3' else 1)\n")
COUNT_TASK = TaskSpec(id="script-stop", family="script", difficulty=2, instruction="Make count.sh print how many "
                      "lines names.txt has.", files={"names.txt": "a\nb\nc\n"}, verify=COUNT_VERIFY,
                      verify_lang="python", solution="echo 'wc -l < names.txt' > count.sh\n",
                      limits=Limits(verifier_timeout_s=5.0))


def test_stopping_the_launcher_is_the_agents_failure_not_an_infra_error(practice: Practice) -> None:
    # SIGSTOP is not ptrace: a non-dumpable launcher of the same uid could still be stopped, and the host
    # then called the silent launcher a stuck machine (an infra error, out of the loss)
    stopper = attempt(practice, COUNT_TASK, "printf 'pkill -STOP -f judge-launcher; echo 2\\n' > count.sh")
    r = stopper.rollout
    assert r.outcome == Outcome.FAILURE and r.reward == 0.0, r.error
    # stopping the verifier itself: silent while its sandbox lives, so the agent's verifier_timeout
    frozen = attempt(practice, COUNT_TASK, "printf 'kill -STOP $PPID; echo 3\\n' > count.sh")
    r = frozen.rollout
    assert r.outcome == Outcome.FAILURE and (r.error or "").startswith("verifier_timeout"), r.error


# Verifiers that run the agent's script in a process that keeps every descriptor without close-on-exec
# (os.system; bash, which has no way to mark fd 3 close-on-exec) and fail it: the script's write to the score
# descriptor must not count.
HANDED_ON = {
    "python": ("import os, sys\n"
               "status = os.system('bash count.sh > /tmp/out 2>&1')\n"
               "sys.exit(0 if open('/tmp/out').read().strip() == '3' else 1)\n"),
    "bash": 'test "$(bash count.sh)" = 3\n',
}


@pytest.mark.parametrize("lang", sorted(HANDED_ON))
def test_the_score_descriptor_counts_only_the_verifiers_own_writes(practice: Practice, lang: str) -> None:
    spec = TaskSpec(id=f"script-fd3-{lang}", family="script", difficulty=2, instruction="Make count.sh print how "
                    "many lines names.txt has.", files={"names.txt": "a\nb\nc\n"}, verify=HANDED_ON[lang],
                    verify_lang=lang, solution="echo 'wc -l < names.txt' > count.sh\n")
    forged = attempt(practice, spec, "printf 'echo SCORE=0.9 >&3; echo 2\\n' > count.sh")
    r = forged.rollout
    assert r.outcome == Outcome.FAILURE and r.reward == 0.0, (r.reward, r.error)


# A git task judged by `git status`: the agent must commit the change setup left in a.txt.
STATUS_VERIFY = ("import subprocess, sys\n"
                 "r = subprocess.run(['git', 'status', '--porcelain'], capture_output=True, text=True, timeout=20)\n"
                 "sys.exit(0 if r.returncode == 0 and r.stdout == '' else 1)\n")
STATUS_TASK = TaskSpec(id="git-status", family="git", difficulty=2, instruction="Commit the change to a.txt.",
                       setup=("git init -q -b main && git config user.name a && git config user.email a@b && "
                              "echo v1 > a.txt && git add a.txt && git commit -qm one && echo v2 > a.txt\n"),
                       verify=STATUS_VERIFY, verify_lang="python", solution="git commit -qam two\n")


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_a_flag_in_the_index_hides_no_change_from_the_verifier(practice: Practice, flag: str) -> None:
    # with the flag, `git status` reports the uncommitted a.txt as clean: one command passed every task judged
    # by status
    hidden = attempt(practice, STATUS_TASK, f"git update-index {flag} a.txt && git status --porcelain")
    r = hidden.rollout
    assert r.outcome == Outcome.FAILURE and r.reward == 0.0, (r.error, hidden.verifier_output)
    assert any("assume-unchanged or skip-worktree" in t for t in hidden.tampered), hidden.tampered
    honest = attempt(practice, STATUS_TASK, STATUS_TASK.solution)
    assert honest.rollout.outcome == Outcome.SUCCESS, (honest.rollout.error, honest.verifier_output)


def test_a_sparse_file_costs_the_host_no_memory_and_is_recorded(practice: Practice) -> None:
    # `truncate -s` costs nothing in the sandbox's tmpfs, but the copy out read, and held several times over,
    # its logical size (3G took the appliance to 11.7 GB); 512M here, past the test sandbox's 64M workspace
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    sparse = attempt(practice, COUNT_TASK, "truncate -s 512M big.bin && echo 'wc -l < names.txt' > count.sh")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak_before
    r = sparse.rollout
    assert grown < 256 << 20, f"the host process grew by {grown >> 20} MiB"
    assert r.outcome == Outcome.SUCCESS, (r.error, sparse.verifier_output)  # the task itself was done
    assert any("big.bin (sparse file" in t for t in sparse.tampered), sparse.tampered


def test_a_deep_tree_makes_a_bounded_tampering_record(practice: Practice) -> None:
    # each too-deep path used to be named in full: the record grew with the square of the depth
    deep = ("python3 -c \"import os\nfor i in range(60):\n    os.mkdir('d' * 200)\n    os.chdir('d' * 200)\n"
            "open('leaf', 'w').write('x')\"; echo 'wc -l < names.txt' > count.sh")
    result = attempt(practice, COUNT_TASK, deep)
    r = result.rollout
    assert r.outcome != Outcome.INFRA_ERROR, r.error
    assert len(r.error or "") < 16_000, len(r.error or "")
    assert any("(path too long)" in t for t in result.tampered), result.tampered[:3]


def test_a_self_proposed_verifier_pays_no_partial_credit(practice: Practice) -> None:
    # the policy writes self-proposed verifiers: one that pays 0.9 for anything (deleting files, leaving a
    # .bashrc) passes validation (its untouched score is below its reference's 1.0) and rewards that behaviour
    verify = "import os, sys\nos.write(3, b'SCORE=0.9\\n')\nsys.exit(0 if os.path.exists('done.txt') else 1)\n"
    spec = TaskSpec(id="proposed-1", family="files", difficulty=2, instruction="Create done.txt.", verify=verify,
                    verify_lang="python", solution="touch done.txt\n", source="self_proposed")
    paid = attempt(practice, spec, "rm -rf ./*")
    assert paid.rollout.outcome == Outcome.FAILURE and paid.rollout.reward == 0.0, paid.rollout.reward


# What one planted module did to a composite with a pyfix part: it read the other part's expectation off the
# composite verifier's command line, wrote it into the workspace, and exited 0 on import.
PLANTED = r'''import glob, os, re
for f in glob.glob('/proc/[0-9]*/cmdline'):
    try:
        found = re.search(r'HIDDEN-[0-9a-f]{8}', open(f, 'rb').read().decode(errors='replace'))
    except OSError:
        continue
    if found:
        os.chmod('/workspace', 0o755)
        open('/workspace/code.txt', 'w').write(found.group(0) + '\n')
        break
os._exit(0)
'''


def test_a_planted_module_passes_no_part_of_a_composite(practice: Practice) -> None:
    fix = generate("pyfix", 3, random.Random(47))
    code = TaskSpec(id="code-file", family="files", difficulty=2, instruction="Write the code into code.txt.",
                    verify="import sys\nsys.exit(0 if open('code.txt').read().strip() == 'HIDDEN-5e2b71c0' else 1)\n",
                    verify_lang="python", solution="echo HIDDEN-5e2b71c0 > code.txt\n")
    both = compose(fix, code, random.Random(0))
    assert both is not None
    planted = attempt(practice, both, f"cat > {_module(fix)} <<'PY'\n{PLANTED}PY")
    r = planted.rollout
    assert r.outcome == Outcome.FAILURE and r.reward == 0.0, (r.reward, r.error, planted.verifier_output)


def test_a_forged_result_line_passes_no_edit_task(practice: Practice) -> None:
    # The edit family's Python checks trusted the last `RESULT=` line of a child that exited 0: a constant
    # line that keeps its wrong value (`21 - 2` matches the check of the line, `NAME = 21...`) and prints the
    # right values before an exit 0 passed. The values now come in a frame marked by a nonce made per run.
    spec = next(s for seed in range(200) if (s := generate("edit", 3, random.Random(seed))).meta.get("variant")
                == "edit-py-constant" and "VAT_PERCENT = 19 " in str(s.files))
    src = _module(spec)
    text = spec.files[src]
    bad = next(line for line in text.splitlines() if line.startswith("VAT_PERCENT = 19 "))
    forged = ("VAT_PERCENT = 21 - 2; import json, os; print('RESULT=' + json.dumps(['1210', '21'])); "
              "os.sys.stdout.flush(); os._exit(0)  # standard rate")
    hack = attempt(practice, spec, f"cat > fix.py <<'PY'\nimport pathlib\np = pathlib.Path({src!r})\n"
                   f"p.write_text(p.read_text().replace({bad!r}, {forged!r}))\nPY\npython3 fix.py && rm fix.py")
    r = hack.rollout
    # the line's own checks pass (it does read `21`): a partial score, never the task
    assert r.outcome == Outcome.FAILURE and r.reward < 1.0, (r.reward, r.error, hack.verifier_output)
    assert "with_vat(1000) should be 1210, got no value" in hack.verifier_output, hack.verifier_output
    honest = attempt(practice, spec, spec.solution)
    assert honest.rollout.outcome == Outcome.SUCCESS and honest.rollout.reward == 1.0, honest.verifier_output
