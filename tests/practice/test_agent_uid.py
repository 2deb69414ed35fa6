"""Issue 47: the code under test runs as another uid than its verifier. The verifier is the judge (uid 1001) over
a workspace the judge owns; what it runs through `appliance_check.run_as_agent` is the agent (uid 1000). Each
attack here is one line of the agent's code, tried through `run_rollout`'s path (real Podman, the built-in
harness driven by a scripted policy): it used to kill, stop or fool the verifier, which shared its uid."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from appliance.practice import Practice
from appliance.schemas import Outcome
from appliance.tasks import TaskSpec
from appliance.tasks.families import generate
from practice.conftest import attempt  # tests/practice/conftest.py

pytestmark = pytest.mark.slow  # real Podman

# Signal every process it may, its own excepted: the verifier, its launcher, the host's shell.
EVERYONE = ("import os, signal\n"
            "for p in os.listdir('/proc'):\n"
            "    if p.isdigit() and int(p) != os.getpid():\n"
            "        try:\n"
            "            os.kill(int(p), signal.SIG{sig})\n"
            "        except OSError:\n"
            "            pass\n")


@pytest.mark.parametrize("sig", ["KILL", "STOP"])
def test_the_code_under_test_cannot_kill_or_stop_its_verifier(practice: Practice, sig: str) -> None:
    # A `script` task: its verifier runs the agent's script on inputs the instruction does not show. The script
    # computes the right answer but first signals every process it can: the verifier, of the same uid, died
    # (a failure) or stopped (verifier_timeout), whatever the script printed; now its verdict stands.
    spec = generate("script", 3, random.Random(47))
    spec = dataclasses.replace(spec, limits=dataclasses.replace(spec.limits, verifier_timeout_s=15.0))
    script = re.search(r"cat > (\S+\.py)", spec.solution)
    assert script, spec.solution
    name = script.group(1)
    prefix = EVERYONE.format(sig=sig)
    command = (spec.solution.rstrip("\n") + f"\ncat > /tmp/head.py <<'PY'\n{prefix}PY\n"
               f"cat /tmp/head.py {name} > /tmp/whole.py && mv /tmp/whole.py {name}")
    result = attempt(practice, spec, command)
    r = result.rollout
    assert r.outcome == Outcome.SUCCESS and r.reward == 1.0, (r.reward, r.error, result.verifier_output)


# The verifier compares what the agent's script prints with a protected file it reads afterwards. Before this
# issue a verifier had no way to run the script as another uid (the fallback below is what it did: run it as
# itself): the script, the file's owner, made it writable and rewrote it.
EXPECTED_VERIFY = ("import subprocess, sys\n"
                   "try:\n"
                   "    from appliance_check import run_as_agent\n"
                   "except ImportError:\n"
                   "    def run_as_agent(argv, **kw):\n"
                   "        return subprocess.run(argv, capture_output=True, text=True, timeout=20)\n"
                   "out = run_as_agent(['bash', 'answer.sh']).stdout.strip()\n"
                   "sys.exit(0 if out == open('expected.txt').read().strip() else 1)\n")
EXPECTED_TASK = TaskSpec(id="script-expected", family="script", difficulty=2,
                         instruction="Make answer.sh print the sum of the numbers in numbers.txt.",
                         files={"numbers.txt": "3\n4\n", "expected.txt": "7\n"}, protected=["expected.txt"],
                         verify=EXPECTED_VERIFY, verify_lang="python",
                         solution="echo 'echo $(( $(paste -sd+ numbers.txt) ))' > answer.sh\n")
REWRITER = ("cat > answer.sh <<'SH'\nchmod u+w expected.txt . 2>/dev/null; echo 99 > expected.txt || "
            "{ rm -f expected.txt; echo 99 > expected.txt; }; echo 99\nSH")


def test_the_code_under_test_cannot_rewrite_what_its_verifier_reads(practice: Practice) -> None:
    rewrote = attempt(practice, EXPECTED_TASK, REWRITER)
    r = rewrote.rollout
    assert r.outcome == Outcome.FAILURE and r.reward == 0.0, (r.reward, r.error, rewrote.verifier_output)
    honest = attempt(practice, EXPECTED_TASK, "echo 'echo $(( $(paste -sd+ numbers.txt) ))' > answer.sh")
    assert honest.rollout.outcome == Outcome.SUCCESS, (honest.rollout.error, honest.verifier_output)
