"""The edit family's operations on line-oriented settings files (table rows, see _ops.py): the everyday
formats (an env file, a shell profile, a Makefile, a daemon's `Keyword value` file, Java-style properties,
ssh client and logrotate blocks, compose-style services), each with look-alikes of the line that changes.

Agents that learnt one-line edits from a few formats copy the format instead of the line: an indentation
the file does not have, the setting next to the one asked for (a key with the same prefix, a commented-out
default). So every file here holds those look-alikes, and the reference names the line exactly: the
shortest span around the change that occurs once in the file (`_kinds.sed_edit`; the whole line anchored with
^...$ when a look-alike key ends the same way), or, where the same line appears in several blocks, its
number as `cat -n` shows it (the demonstration reads the file that way first, `episode_shapes.read_command`)."""

from __future__ import annotations

import re

from appliance.tasks.families._common import WORDS
from appliance.tasks.families._kinds import one_line, sed_edit
from appliance.tasks.families._ops import Case, Ctx, op, q, text_of

# (file names, how a key is spelled from its words, how a line is written, the comment prefix)
SYNTAXES = [
    (["app.env", ".env", "defaults.env", "worker.env"], lambda w: "_".join(w).upper(), "{k}={v}", "# "),
    (["profile.sh", "env.sh", "vars.sh"], lambda w: "_".join(w).upper(), "export {k}={v}", "# "),
    (["Makefile", "config.mk", "build.mk"], lambda w: "_".join(w).upper(), "{k} = {v}", "# "),
    (["agent.conf", "relay.conf", "mirror.conf"], lambda w: "".join(x.title() for x in w), "{k} {v}", "#"),
    (["app.properties", "service.properties"], lambda w: ".".join(w), "{k}={v}", "# "),
]

# (what the request calls it, the key's words, a look-alike key's words and what that one is, the values)
SETTINGS = [
    ("the port it listens on", ["listen", "port"], ["listen", "port", "admin"], "the admin port",
     [str(p) for p in range(8000, 8100, 7)]),
    ("the log level", ["log", "level"], ["log", "level", "db"], "the database's log level",
     ["info", "debug", "warn", "error"]),
    ("the request timeout (seconds)", ["timeout"], ["connect", "timeout"], "the connect timeout",
     [str(s) for s in (10, 15, 20, 30, 45, 60, 90)]),
    ("the number of workers", ["workers"], ["workers", "max"], "the most workers it may scale to",
     [str(n) for n in range(2, 17)]),
    ("the cache lifetime (seconds)", ["cache", "ttl"], ["cache", "ttl", "stale"], "how long stale entries are served",
     [str(s) for s in (60, 120, 300, 600, 900, 3600)]),
    ("the upload limit (MB)", ["max", "upload", "mb"], ["max", "upload", "files"], "the most files per upload",
     [str(n) for n in (5, 10, 20, 25, 50, 100)]),
    ("maintenance mode", ["maintenance", "mode"], ["maintenance", "mode", "banner"], "the maintenance banner",
     ["true", "false"]),
    ("sending emails", ["send", "emails"], ["send", "emails", "digest"], "the daily digest emails",
     ["true", "false"]),
    ("the database host", ["db", "host"], ["db", "host", "replica"], "the read replica's host",
     ["db.internal", "10.0.3.7", "pg-main.lan", "127.0.0.1", "db2.internal"]),
    ("the session length (minutes)", ["session", "minutes"], ["session", "minutes", "admin"],
     "the admin session length", [str(n) for n in (15, 20, 30, 45, 60, 120)]),
]
OTHERS = [(["app", "name"], WORDS), (["region"], ["eu-west", "us-east", "ap-south"]),
          (["retries"], ["1", "2", "3", "5"]), (["metrics", "enabled"], ["true", "false"]),
          (["data", "dir"], ["/var/lib/app", "/srv/data", "/opt/app/data"]), (["tz"], ["UTC", "Europe/Oslo"])]


@op("edit", "edit-setting", (2, 3, 4), "GNU sed: s/// on one line of a settings file, among look-alikes", "sed -i", [
    "In {src}, set {key} to {new} (it is {old} now). Every other line stays as it is.",
    "Ops asked for {what} to be {new} from now on; in {src} it is still {old}. Could you change just that "
    "setting? Leave the rest of the file alone, including the comments.",
    "{src}: {what} shoud be {new} not {old}. only that line pls",
    "Make {what} in {src} {new} instead of {old}, without touching any other line.",
])
def _setting(c: Ctx) -> Case:
    names, spell, form, comment = c.pick(SYNTAXES)
    src = c.pick(names)
    what, words, alike, _, values = c.pick(SETTINGS)
    old, new = c.pick(values, 2)
    alike_value = c.pick([v for v in values if v != new])  # may equal old: then only the key tells them apart
    key = spell(words)
    lines = [f"{comment}{c.pick(WORDS)} settings - {c.pick(['edit with care', 'read at start-up', 'keep sorted'])}"]
    others = [form.format(k=spell(w), v=c.pick(vs)) for w, vs in c.pick(OTHERS, 3)]
    body = [form.format(k=key, v=old), form.format(k=spell(alike), v=alike_value), *others]
    c.rng.shuffle(body)
    idx_in_body = body.index(form.format(k=key, v=old))
    # a commented-out earlier value right above the line: `s/KEY=old/.../` without ^ would still find the
    # right line, but a bare `s/old/new/` on the file can hit the comment or the look-alike
    earlier = c.pick([v for v in values if v not in (old, new)] or [new])
    body.insert(idx_in_body, f"{comment}{form.format(k=key, v=earlier)}")
    lines += body
    idx = lines.index(form.format(k=key, v=old))
    new_line = form.format(k=key, v=new)
    verify = one_line(src, text_of(lines), idx, re.escape(new_line) + r"\s*", f"{key} should be {new}")
    return Case({src: text_of(lines)}, verify, sed_edit(text_of(lines), idx, new_line, src),
                dict(src=src, key=key, what=what, old=old, new=new))


def _ssh_blocks(c: Ctx, names: list[str], value: str) -> tuple[list[str], list[int]]:
    lines = ["# hosts I reach every day"]
    rows = []
    for n in names:
        lines += [f"Host {n}", f"    HostName {n}.{c.pick(['internal', 'lan', 'example.net'])}",
                  f"    User {c.pick(['ci', 'deploy', 'ops'])}"]
        rows.append(len(lines))
        lines += [f"    Port {value}", ""]
    return lines[:-1], rows


def _logrotate_blocks(c: Ctx, names: list[str], value: str) -> tuple[list[str], list[int]]:
    lines = ["# rotated nightly by cron"]
    rows = []
    for n in names:
        lines += [f"/var/log/{n}/*.log {{", f"    {c.pick(['daily', 'weekly'])}"]
        rows.append(len(lines))
        lines += [f"    rotate {value}", "    compress", "    missingok", "}", ""]
    return lines[:-1], rows


def _services_blocks(c: Ctx, names: list[str], value: str) -> tuple[list[str], list[int]]:
    lines = ["services:"]
    rows = []
    for n in names:
        lines += [f"  {n}:", f"    image: registry.local/{n}:{c.rng.randint(1, 4)}.{c.rng.randint(0, 9)}"]
        rows.append(len(lines))
        lines += [f"    replicas: {value}", f"    restart: {c.pick(['always', 'on-failure'])}"]
    return lines, rows


# (file names, the block's kind as the request says it, the setting, its values, the builder)
BLOCKS = [
    (["ssh_config", "hosts.conf"], "host", "the SSH port", [str(p) for p in (22, 2222, 2200, 22022)], _ssh_blocks),
    (["logrotate.conf", "rotate.conf"], "log folder", "the number of old logs kept", [str(n) for n in (4, 7, 14, 30)],
     _logrotate_blocks),
    (["services.yml", "stack.yml"], "service", "the replica count", [str(n) for n in range(1, 7)], _services_blocks),
]


@op("edit", "edit-in-block", (3, 4), "GNU sed: an address by line number (cat -n shows it)", "sed -i", [
    "In {src}, change {setting} for the {block} {name} from {old} to {new}. The other {kinds} keep theirs.",
    "Quick one: {setting} for {name} in {src} should be {new} now (it's {old}, like the other {kinds}, which "
    "stay as they are). Please don't touch anything else in the file.",
    "{src} - {name}: {setting} {old} -> {new}, leave the other {kinds} alone",
    "Only the {block} {name} in {src} gets {new} for {setting} (instead of {old}); every other line stays.",
])
def _in_block(c: Ctx) -> Case:
    names, block, setting, values, build = c.pick(BLOCKS)
    src = c.pick(names)
    old, new = c.pick(values, 2)
    blocks = c.pick(["web", "api", "backup", "build", "mail", "cache", "search", "billing"], c.rng.randint(2, 3))
    lines, rows = build(c, blocks, old)
    which = c.rng.randrange(len(blocks))
    idx = rows[which]
    new_line = lines[idx].replace(old, new)
    verify = one_line(src, text_of(lines), idx, re.escape(new_line) + r"\s*",
                      f"{setting} of {blocks[which]} should be {new}")
    return Case({src: text_of(lines)}, verify, f"sed -i '{idx + 1}s/{old}/{new}/' {q(src)}",
                dict(src=src, block=block, kinds=block + "s", name=blocks[which], setting=setting, old=old, new=new))
