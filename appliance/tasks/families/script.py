"""Write a small script to spec; the verifier runs it on inputs the instruction does not show."""

from __future__ import annotations

import random

from appliance.tasks.families._common import AGENT_RUN, PEOPLE, WORDS, make, pick, spelled_out
from appliance.tasks.families._ops import Case, Ctx, generate_family, op, sentences, text_of
from appliance.tasks.format import TaskSpec

FAMILY = "script"
DESCRIPTION = "write a small bash or Python script to a spec"


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint,
                           legacy=dict(enumerate([_l1, _l2, _l3, _l4, _l5], 1)))


def _runs(cmd: list[str], cases: list[tuple[list[str], str]]) -> str:
    """Checks that `cmd + args` (run as the agent) prints the expected output for each case."""
    return (AGENT_RUN + f"CMD = {cmd!r}\n"
            f"for args, want in {cases!r}:\n"
            "    r = run_as_agent(CMD + args)\n"
            "    check(norm(r.stdout) == norm(want),\n"
            "          f'{\" \".join(CMD + args)} should print {want!r}, printed {r.stdout!r} {r.stderr[-200:]!r}')")


def _l1(rng: random.Random) -> TaskSpec:
    word, name = rng.choice(WORDS), rng.choice(["say", "hello", "run", "show", "print"])
    cmd = f"echo 'echo {word}' > {name}.sh"
    return make(FAMILY, 1, "echo", instruction=spelled_out(cmd), files={}, solution=cmd,
                verify=_runs(["bash", f"{name}.sh"], [([], word)]))


def _l2(rng: random.Random) -> TaskSpec:
    greet, name = rng.choice(["Hello", "Hi", "Welcome", "Good morning"]), rng.choice(["greet", "hello", "welcome"])
    example = rng.choice(PEOPLE)
    instruction = (f"Create a bash script {name}.sh that prints '{greet}, NAME!' where NAME is its first argument. "
                   f"For example `bash {name}.sh {example}` prints: {greet}, {example}!")
    cases = [([p], f"{greet}, {p}!") for p in pick(rng, PEOPLE, 3)]
    solution = f"cat > {name}.sh <<'EOF'\necho \"{greet}, $1!\"\nEOF"
    return make(FAMILY, 2, "greet", instruction=instruction, files={}, solution=solution,
                verify=_runs(["bash", f"{name}.sh"], cases))


OPS = {
    "sum": ("the sum", "sum(nums)"),
    "max": ("the largest", "max(nums)"),
    "min": ("the smallest", "min(nums)"),
    "product": ("the product", "__import__('math').prod(nums)"),
}


def _l3(rng: random.Random) -> TaskSpec:
    op = rng.choice(list(OPS))
    what, expr = OPS[op]
    ex = [rng.randint(1, 9) for _ in range(3)]
    instruction = (f"Write a Python script {op}.py that prints {what} of the integer numbers given as its "
                   f"arguments. For example `python3 {op}.py {' '.join(map(str, ex))}` prints "
                   f"{eval(expr, {'nums': ex})}.")
    cases = []
    for _ in range(3):
        nums = [rng.randint(-20, 40) for _ in range(rng.randint(1, 5))]
        cases.append(([str(n) for n in nums], str(eval(expr, {"nums": nums}))))
    solution = f"cat > {op}.py <<'EOF'\nimport sys\nnums = [int(a) for a in sys.argv[1:]]\nprint({expr})\nEOF"
    return make(FAMILY, 3, op, instruction=instruction, files={}, solution=solution,
                verify=_runs(["python3", f"{op}.py"], cases))


def _l4(rng: random.Random) -> TaskSpec:
    kind = rng.choice(["reverse", "longest", "numbered"])
    spec = {
        "reverse": ("prints the lines of the file in reverse order (last line first)",
                    "print('\\n'.join(reversed(lines)))", lambda ls: "\n".join(reversed(ls))),
        "longest": ("prints the longest line of the file (the first one if several are equally long)",
                    "print(max(lines, key=len) if lines else '')", lambda ls: max(ls, key=len)),
        "numbered": ("prints each line of the file prefixed with its line number and a colon, like '1:first'",
                     "print('\\n'.join(f'{i}:{l}' for i, l in enumerate(lines, 1)))",
                     lambda ls: "\n".join(f"{i}:{ln}" for i, ln in enumerate(ls, 1))),
    }[kind]
    text, code, fn = spec
    instruction = f"Write a Python script {kind}.py that takes a file path as its argument and {text}."
    cases_files, cases = {}, []
    for i in range(2):
        lines = [" ".join(pick(rng, WORDS, rng.randint(1, 4))) for _ in range(rng.randint(3, 6))]
        path = f"/tmp/case{i}.txt"
        cases_files[path] = "\n".join(lines) + "\n"
        cases.append(([path], fn(lines)))
    write = "".join(f"open({p!r}, 'w').write({t!r})\n" for p, t in cases_files.items())
    solution = (f"cat > {kind}.py <<'EOF'\nimport sys\nlines = open(sys.argv[1]).read().splitlines()\n{code}\nEOF")
    return make(FAMILY, 4, kind, instruction=instruction, files={}, solution=solution,
                verify=write + _runs(["python3", f"{kind}.py"], cases))


def _l5(rng: random.Random) -> TaskSpec:
    a, b = rng.sample([2, 3, 4, 5, 7], 2)
    wa, wb = (w.capitalize() for w in pick(rng, WORDS, 2))

    def out(n: int) -> str:
        return "\n".join((wa if i % a == 0 else "") + (wb if i % b == 0 else "") or str(i) for i in range(1, n + 1))

    instruction = (f"Write a Python script fizz.py that takes a number N and prints the numbers 1 to N, one per "
                   f"line, but prints {wa} instead of multiples of {a}, {wb} instead of multiples of {b}, and "
                   f"{wa}{wb} instead of multiples of both.")
    cases = [([str(n)], out(n)) for n in (rng.randint(a * b, a * b + 10), rng.randint(1, 5))]
    solution = (f"cat > fizz.py <<'EOF'\nimport sys\nfor i in range(1, int(sys.argv[1]) + 1):\n"
                f"    s = ('{wa}' if i % {a} == 0 else '') + ('{wb}' if i % {b} == 0 else '')\n    print(s or i)\nEOF")
    return make(FAMILY, 5, "fizz", instruction=instruction, files={}, solution=solution,
                verify=_runs(["python3", "fizz.py"], cases))


# --- operations (table-driven; see _ops.py) -----------------------------------------------------------
@op("script", "py-count-matching-lines", (2, 3, 4), "Python: sys.argv, open, str methods", "python3", [
    "Write a Python script {name}.py: `python3 {name}.py FILE WORD` prints how many lines of FILE contain WORD.",
    "Create {name}.py that takes a file path and a word as arguments and prints the number of lines of the file "
    "that contain the word.",
    "{name}.py FILE WORD -> print the count of FILE's lines containing WORD. Write it in Python.",
    "I need a Python tool {name}.py (args: path, word) that outputs the number of matching lines.",
])
def _pycount(c: Ctx) -> Case:
    name = c.pick(["countword", "matches", "linecount", "grepcount"])
    files = {"sample.txt": text_of(sentences(c.rng, 5))}
    cases = [(["sample.txt", "the"], str(sum("the" in x for x in files["sample.txt"].splitlines())))]
    verify = ("import tempfile\nd = tempfile.mkdtemp()\nos.chmod(d, 0o755)\n"  # (the agent's uid reads it)
              "open(d + '/t.txt', 'w').write('a cat\\nno\\ncat cat\\nCat\\n')\n"
              + _runs(["python3", f"{name}.py"], cases) + "\n"
              f"r = run_as_agent(['python3', '{name}.py', d + '/t.txt', 'cat'])\n"
              "check(r.stdout.strip() == '2', 'hidden case: 2')")
    sol = (f"cat > {name}.py <<'EOF'\nimport sys\npath, word = sys.argv[1], sys.argv[2]\n"
           "print(sum(1 for line in open(path) if word in line))\nEOF")
    return Case(files, verify, sol, dict(name=name), partial=f"cat > {name}.py <<'EOF' ...")


@op("script", "bash-loop-count", (2, 3, 4), "bash: for loop, arguments", "bash", [
    "Write a bash script {name}.sh that prints the numbers from 1 up to its first argument N, one per line.",
    "Create {name}.sh: `bash {name}.sh N` counts 1, 2, ..., N (one number per line).",
    "{name}.sh should take a number N and print 1 through N, each on its own line.",
    "A counting script, please: {name}.sh N outputs the integers 1..N, a line each.",
])
def _count(c: Ctx) -> Case:
    name = c.pick(["count", "upto", "numbers", "seqs"])
    cases = [([str(n)], "\n".join(str(i) for i in range(1, n + 1))) for n in (1, 3, c.rng.randint(5, 9))]
    return Case({}, _runs(["bash", f"{name}.sh"], cases), f"printf '%s\\n' 'seq 1 \"$1\"' > {name}.sh",
                dict(name=name))


@op("script", "env-default", (3, 4), "bash: parameter expansion ${VAR:-default}", "bash", [
    "Write {name}.sh that prints the value of the environment variable {var}, or {default} when it is unset or empty.",
    "Create a bash script {name}.sh: print ${var} if it is set (non-empty), else print {default}.",
    "{name}.sh should echo {var} from the environment, falling back to \"{default}\".",
    "Script {name}.sh: output {var}'s value; default {default}.",
], heldout=True)
def _env(c: Ctx) -> Case:
    name, var = c.pick(["show_env", "which_env", "mode"]), c.pick(["APP_ENV", "STAGE", "TARGET"])
    default = c.pick(["development", "local", "staging"])
    verify = (AGENT_RUN + "import os as _os\n"
              f"r = run_as_agent(['bash', '{name}.sh'], env={{k: v for k, v in _os.environ.items() if k != '{var}'}})\n"
              f"check(r.stdout.strip() == '{default}', 'unset: should print {default}, printed ' + repr(r.stdout))\n"
              f"r = run_as_agent(['bash', '{name}.sh'], env=dict(_os.environ, {var}='prod-eu'))\n"
              "check(r.stdout.strip() == 'prod-eu', 'set: should print its value, printed ' + repr(r.stdout))")
    return Case({}, verify, f"printf '%s\\n' 'echo \"${{{var}:-{default}}}\"' > {name}.sh",
                dict(name=name, var=var, default=default))
