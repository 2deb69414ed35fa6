"""For verifiers (installed in the sandbox image): judge the values the agent's code computes, never the
exit status of a process that imported that code.

A verifier that runs `python3 test_x.py` or `python3 -c 'from x import f; assert f(2) == 4'` and trusts
the exit status passes a module that does `import os; os._exit(0)` on import. Here the agent's module
is imported in a child process that prints what each expression came to, as JSON in a frame marked by a
nonce made for this run; the expectations stay in the verifier (its source is not readable from the
sandbox), so the child can only say what the code computes. No frame (an exit, a crash, a hang) or two
frames mean no values: every expression fails.

    from appliance_check import returns
    wrong = returns("calc", {"add(2, 3)": 5, "is_even(7)": False})
    print(wrong)                  # {expression: what it came to} for each one that is not right
    sys.exit(1 if wrong else 0)

Equality is Python's `==` after a JSON round trip (3.0 equals 3; a tuple comes back as a list), except
that a bool equals only a bool (a function that should answer False must not answer 0 or None).

`run_as_agent(argv, stdin=..., timeout=..., env=...)` runs the code under test (a script the agent wrote)
as the agent's uid, through the verifier's launcher (fd 5): the verifier runs as another uid, so that
code can neither kill, stop nor inspect it, nor change a file of the workspace while it reads it; the
call returns a `subprocess.CompletedProcess` (returncode, stdout, stderr; 124 and the reason in stderr
when it ran out of time), and nothing it started outlives it. `returns` imports the module that way.

    from appliance_check import run_as_agent
    r = run_as_agent(["python3", "total.py", "/tmp/hidden.csv"], timeout=10)
    sys.exit(0 if r.stdout.strip() == "42" else 1)

A file the verifier hands it must be readable by others (the agent's uid): write it in /tmp, not in a
`tempfile.mkdtemp()` directory (mode 0700). Outside the appliance's launcher (fd 5 absent: a verifier
tried by hand) it runs the command directly, as the caller's uid.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess

AGENT_FD = 5  # the launcher's run-as-agent channel, held by the verifier's own process only
AGENT_ENV = {"HOME": "/home/agent", "USER": "agent"}

# The child: reads its request on stdin, imports the module, evaluates each expression with the module's
# names, prints [["value", json, truth] | ["error", text], ...] between two nonces, and exits.
CHILD = r"""
import importlib, json, sys
req = json.loads(sys.stdin.readline())
nonce = req["nonce"]
try:
    names = dict(vars(importlib.import_module(req["module"])))
    failed = None
except BaseException as e:
    names, failed = None, f"importing {req['module']}: {type(e).__name__}: {e}"
out = []
for expr in req["exprs"]:
    try:
        if names is None:
            raise ImportError(failed)
        v = eval(expr, dict(names))
        out.append(["value", json.dumps(v, default=repr), bool(v)])
    except BaseException as e:
        out.append(["error", f"{type(e).__name__}: {e}"[:300]])
sys.stdout.write("\n" + nonce + json.dumps(out) + nonce + "\n")
sys.stdout.flush()
"""


def values(module: str, exprs: list[str], timeout: float = 20) -> dict[str, tuple]:
    """What each expression, evaluated with `module`'s names (imported from the current directory in a
    child `python3`), came to: ("value", value) or ("error", text)."""
    nonce = "@" + os.urandom(16).hex() + "@"
    request = json.dumps({"module": module, "exprs": list(exprs), "nonce": nonce}) + "\n"
    r = run_as_agent(["python3", "-c", CHILD], stdin=request, timeout=timeout)
    frames = re.findall(re.escape(nonce) + r"(.*?)" + re.escape(nonce), r.stdout)
    why = (r.stderr.strip().splitlines() or [f"it exited {r.returncode} and printed no values"])[-1][:300]
    got: list = []
    if len(frames) == 1:
        try:
            got = json.loads(frames[0])
        except ValueError:
            got = []
    if len(got) != len(exprs):
        return {e: ("error", why if len(frames) < 2 else "the code printed a second frame") for e in exprs}
    out = {}
    for expr, item in zip(exprs, got):
        try:
            out[expr] = ("value", json.loads(item[1])) if item[0] == "value" else ("error", str(item[1]))
        except (ValueError, TypeError, IndexError):
            out[expr] = ("error", "unreadable value")
    return out


def same(got: object, want: object) -> bool:
    """`==` after a JSON round trip, but a bool equals only a bool (at any depth)."""
    want = json.loads(json.dumps(want, default=repr))
    return _same(got, want)


def _same(got: object, want: object) -> bool:
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(_same, got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    return got == want


def returns(module: str, cases: dict[str, object], timeout: float = 20) -> dict[str, str]:
    """The expressions of `cases` (expression -> expected value) that `module` gets wrong, each with what
    it came to; empty when every one is right."""
    got = values(module, list(cases), timeout)
    wrong = {}
    for expr, want in cases.items():
        kind, value = got[expr]
        if kind != "value":
            wrong[expr] = str(value)
        elif not same(value, want):
            wrong[expr] = f"{json.dumps(value)[:80]}, expected {json.dumps(want, default=repr)[:80]}"
    return wrong


def run_as_agent(argv: list[str], stdin: str | None = None, timeout: float = 20, env: dict[str, str] | None = None,
                 cwd: str = "/workspace") -> subprocess.CompletedProcess:
    """Run `argv` (looked up on PATH) as the agent's uid in `cwd`, with `stdin` as its input; its exit status
    and (bounded) output. `env`: its whole environment (default: the verifier's, with the agent's HOME)."""
    env = dict(os.environ, **AGENT_ENV) if env is None else dict(env)
    argv = [str(a) for a in argv]
    try:
        channel = stat.S_ISSOCK(os.fstat(AGENT_FD).st_mode)
    except OSError:
        channel = False
    if not channel:
        try:
            return subprocess.run(argv, input=stdin or "", capture_output=True, text=True, timeout=timeout, env=env,
                                  cwd=cwd, errors="replace")
        except (OSError, subprocess.TimeoutExpired) as e:
            return subprocess.CompletedProcess(argv, 124, "", f"{type(e).__name__}: {e}"[:300])
    request = {"argv": argv, "stdin": stdin or "", "timeout": timeout, "env": env, "cwd": cwd}
    sock = socket.socket(fileno=os.dup(AGENT_FD))  # (a dup: closing it leaves fd 5 for the next call)
    try:
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        data = json.dumps({"error": f"run_as_agent: {e}"}).encode()
    finally:
        sock.close()
    try:
        reply = json.loads(data or b"{}")
    except ValueError:
        reply = {}
    if "returncode" not in reply:
        why = reply.get("error") or "the launcher gave no answer"
        return subprocess.CompletedProcess(argv, 124, "", str(why))
    stderr = reply["stderr"] + (f"\n[ran past {timeout:g} s]" if reply.get("timed_out") else "")
    code = 124 if reply.get("timed_out") else reply["returncode"]
    return subprocess.CompletedProcess(argv, code, reply["stdout"], stderr)
