"""Issue 47: in a real sandbox, the verifier is the judge (uid 1001) over a workspace it owns, the code under test it
runs through `appliance_check.run_as_agent` is the agent (uid 1000), nothing that code starts outlives the call,
and what the judge leaves is the agent's uid's again afterwards, so the host's scrub can empty a reused sandbox."""

from __future__ import annotations

import pytest

from appliance.config import Settings
from appliance.sandbox import Sandbox
from appliance.sandbox.transfer import pack_files
from appliance.tasks import TaskSpec
from appliance.tasks.verify import judge, passed, prepare

pytestmark = pytest.mark.slow  # real Podman

VERIFY = r'''import os, sys, tempfile
from appliance_check import run_as_agent
d = tempfile.mkdtemp()  # (mode 0700, the judge's: left for the host's scrub)
open(d + "/x", "w").write("x")
open("/tmp/left", "w").write("x")
r = run_as_agent(["bash", "-c", "id -u; stat -c %U:%G:%a a.txt; (echo hi > b.txt) 2>/dev/null || echo denied; "
                  "chmod u+w a.txt 2>/dev/null || echo denied; sleep 300 & echo $!"])
out = r.stdout.split()
left = out[-1] if out else "0"
def gone(pid):  # dead, or a zombie its new parent has not reaped yet
    try:
        return " Z " in open(f"/proc/{pid}/stat").read().replace("(sleep)", "")
    except OSError:
        return True
print(os.getuid(), out, r.returncode, r.stderr)
ok = (os.getuid() == 1001 and out[:4] == ["1000", "judge:agent:444", "denied", "denied"] and r.returncode == 0
      and gone(left) and open("a.txt").read() == "x")
sys.exit(0 if ok else 1)
'''
SPEC = TaskSpec(id="uid-facts", family="script", difficulty=2, instruction="-", files={"a.txt": "x"}, verify=VERIFY,
                verify_lang="python", solution="true\n")


def test_the_verifier_is_the_judge_and_the_code_under_test_the_agent(sandbox_settings: Settings) -> None:
    archive, _ = prepare(SPEC, pack_files(SPEC.files))
    with Sandbox.start(sandbox_settings) as sb:
        for _ in range(2):  # the same sandbox twice, as validation reuses one
            r = judge(sb, SPEC, archive)
            assert passed(r), (r.exit_code, r.stdout, r.stderr)
            sb.scrub()  # raises SandboxNotClean when the judge's files cannot be removed
            left = sb.exec("find /workspace /tmp /dev/shm -mindepth 1 | head -5; stat -c %U /workspace")
            assert left.stdout.split() == ["agent"], left.stdout
