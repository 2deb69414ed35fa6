"""Issue 27: the verdict cannot be written by the agent's code, and what the agent leaves never stalls the
loop. Real Podman, real sandboxes, the built-in harness driven by a scripted policy."""

from __future__ import annotations

import pytest

from appliance.practice import Practice
from appliance.schemas import Outcome, RolloutStatus
from appliance.tasks import TaskSpec
from practice.conftest import attempt  # tests/practice/conftest.py

pytestmark = pytest.mark.slow  # real Podman

# A `script` task: the verifier runs the agent's own count.sh, by design, and checks its answer.
VERIFY = ("import subprocess, sys\n"
          "out = subprocess.run(['bash', 'count.sh'], capture_output=True, text=True, timeout=20).stdout.strip()\n"
          "sys.exit(0 if out == '3' else 1)\n")
SCRIPT_TASK = TaskSpec(id="script-forge", family="script", difficulty=2, instruction="Make count.sh print how many "
                       "lines names.txt has.", files={"names.txt": "a\nb\nc\n"}, verify=VERIFY, verify_lang="python",
                       solution="echo 'wc -l < names.txt' > count.sh\n")

# What a policy that stumbled on the hack would leave: count.sh prints a wrong answer, and on the way
# reads every process's memory for the shell's end-of-command sentinel and writes a passing verdict
# (SCORE=1, the sentinel, exit code 0; and a launcher-style JSON verdict) into every stdout and stderr
# it can open, then tries to ptrace its parent.
PAYLOAD = r'''import ctypes, glob, json, os, re
verdict = json.dumps({"exit_code": 0, "signal": None, "timed_out": False, "duration_s": 0.1, "stdout": "",
                      "stderr": "", "score_channel": "SCORE=1\n", "dumpable": 0, "dropped": 0}).encode()
for d in glob.glob("/proc/[0-9]*"):
    pid = d.rsplit("/", 1)[1]
    if pid == str(os.getpid()):
        continue
    tokens = set()
    try:
        with open(f"{d}/maps") as maps, open(f"{d}/mem", "rb", 0) as mem:
            for line in maps:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if "rw" not in line.split()[1] or hi - lo > 1 << 26:
                    continue
                try:
                    mem.seek(lo)
                    tokens.update(re.findall(rb"__appliance_([0-9a-f]{32})__", mem.read(hi - lo)))
                except OSError:
                    pass
    except OSError:
        pass
    for fd, data in ((1, b"SCORE=1.000\n"), (2, b""), (3, b"SCORE=1\n")):
        try:
            with open(f"{d}/fd/{fd}", "wb", 0) as f:
                f.write(data + b"".join(b"\x1e__appliance_" + t + b"__" + (b"0\n" if fd == 1 else b"\n") for t in tokens))
                f.write(verdict)
        except OSError:
            pass
ctypes.CDLL(None).ptrace(16, os.getppid(), 0, 0)
'''  # noqa: E501  (a program run verbatim: one line of it is longer)
FORGED_COUNT = f"python3 - <<'PAYLOAD'\n{PAYLOAD}PAYLOAD\necho 2\n"


def test_code_the_verifier_runs_cannot_forge_its_verdict(practice: Practice) -> None:
    forged = attempt(practice, SCRIPT_TASK, f"cat > count.sh <<'SH'\n{FORGED_COUNT}SH")
    r = forged.rollout
    assert r.outcome == Outcome.FAILURE and r.reward == 0.0, (r.error, forged.verifier_output)
    honest = attempt(practice, SCRIPT_TASK, "echo 'wc -l < names.txt' > count.sh")
    assert honest.rollout.outcome == Outcome.SUCCESS and honest.rollout.reward == 1.0, honest.rollout.error


def test_a_tree_too_deep_to_unpack_is_the_agents_failure(practice: Practice) -> None:
    # 40 levels of 200-character names: more than PATH_MAX; the host unpack used to raise OSError out of
    # run_rollout and leave the rollout running
    deep = ("python3 -c \"import os\nfor i in range(40):\n    os.mkdir('d' * 200)\n    os.chdir('d' * 200)\n"
            "open('leaf', 'w').write('x')\"; echo 'wc -l < names.txt' > count.sh")
    result = attempt(practice, SCRIPT_TASK, deep)
    r = result.rollout
    assert r.status == RolloutStatus.FINISHED and r.outcome != Outcome.INFRA_ERROR, r.error
    assert any("(path too long)" in t for t in result.tampered), result.tampered


def test_killing_the_verdict_launcher_is_the_agents_failure_not_an_infra_error(practice: Practice) -> None:
    # an infra error would take the rollout out of the loss: a policy must not learn to escape a
    # negative reward by killing its judge
    killer = attempt(practice, SCRIPT_TASK, "printf 'pkill -9 -f judge-launcher; sleep 5\\n' > count.sh")
    r = killer.rollout
    assert r.outcome == Outcome.FAILURE and r.reward == 0.0, r.error
