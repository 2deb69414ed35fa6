"""What the git family's modules share: a repository's own identity, commits with fixed dates, and the
verifier's git helper."""

from __future__ import annotations

from appliance.tasks.families._common import q

# The repo carries its own identity so commits work in a fresh sandbox with an empty $HOME.
REPO = ("git init -q -b main\ngit config user.name agent\ngit config user.email agent@example.com\n"
        "git config commit.gpgsign false\n")

# The verifier's workspace copy may belong to another uid than the verifier: git would refuse it as
# "dubious ownership" without a safe.directory entry in a global config of our own.
GIT_PRELUDE = """
import tempfile
_home = tempfile.mkdtemp()
with open(os.path.join(_home, ".gitconfig"), "w") as _f:
    _f.write("[safe]\\n\\tdirectory = *\\n")
GENV = dict(os.environ, HOME=_home, GIT_CONFIG_NOSYSTEM="1")
def git(*args):
    r = run(["git", *args], env=GENV)
    return r.stdout.strip() if r.returncode == 0 else None
"""


def commit(msg: str) -> str:
    return f"git add -A\ngit commit -q -m {q(msg)}\n"


def dated_commit(msg: str, day: int, paths: str = "-A") -> str:
    """A commit with fixed author and committer dates (2024-03-<day>), so its hash is the same every time."""
    when = f"2024-03-{day:02d}T{9 + day % 8:02d}:{(day * 7) % 60:02d}:00+0000"
    return (f"git add {paths}\nGIT_AUTHOR_DATE={when} GIT_COMMITTER_DATE={when} git commit -q -m {q(msg)}\n")
