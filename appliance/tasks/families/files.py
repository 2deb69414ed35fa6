"""Files and directories: create, copy, move, delete, organise."""

from __future__ import annotations

import random

from appliance.tasks.families._common import AGENT_RUN, NAMES, WORDS, make, pick, spelled_out
from appliance.tasks.families._ops import (
    STEMS,
    Case,
    Ctx,
    generate_family,
    gone,
    lines_is,
    number_is,
    op,
    q,
    sentence,
    sentences,
    text_of,
)
from appliance.tasks.format import TaskSpec

FAMILY = "files"
DESCRIPTION = "create, copy, move and delete files and directories"


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint,
                           legacy=dict(enumerate([_l1, _l2, _l3, _l4, _l5], 1)))


def _l1(rng: random.Random) -> TaskSpec:
    name, word = rng.choice(NAMES), rng.choice(WORDS)
    kind = rng.choice(["echo", "mkdir", "copy"])
    files: dict[str, str]
    if kind == "echo":
        cmd, files = f"echo {word} > {name}.txt", {}
        check = f"text_is({name + '.txt'!r}, {word!r})"
    elif kind == "mkdir":
        cmd, files = f"mkdir {word}", {}
        check = f"check(os.path.isdir({word!r}), 'directory {word} should exist')"
    else:
        other = rng.choice([w for w in WORDS if w != word])
        cmd, files = f"cp {name}.txt {other}.txt", {f"{name}.txt": f"{word}\n"}
        check = f"text_is({other + '.txt'!r}, {word!r})\ntext_is({name + '.txt'!r}, {word!r})"
    return make(FAMILY, 1, kind, instruction=spelled_out(cmd), files=files, verify=check, solution=cmd)


def _l2(rng: random.Random) -> TaskSpec:
    name, word = rng.choice(NAMES), rng.choice(WORDS)
    kind = rng.choice(["create", "copy", "mkdir"])
    if kind == "create":
        instruction = f"Create a file named {name}.txt containing the single line: {word}"
        files, solution = {}, f"echo {word} > {name}.txt"
        check = f"text_is({name + '.txt'!r}, {word!r})"
    elif kind == "copy":
        other = rng.choice([n for n in NAMES if n != name])
        instruction = f"Make a copy of {name}.txt named {other}.txt. Keep the original."
        files, solution = {f"{name}.txt": f"{word}\n"}, f"cp {name}.txt {other}.txt"
        check = f"text_is({other + '.txt'!r}, {word!r})\ntext_is({name + '.txt'!r}, {word!r})"
    else:
        instruction = f"Create a directory named {word} and inside it an empty file named {name}.txt."
        files, solution = {}, f"mkdir -p {word} && touch {word}/{name}.txt"
        check = f"check(os.path.isfile({word + '/' + name + '.txt'!r}), '{word}/{name}.txt should exist')"
    return make(FAMILY, 2, kind, instruction=instruction, files=files, verify=check, solution=solution)


def _l3(rng: random.Random) -> TaskSpec:
    d, name = rng.choice(WORDS), rng.choice(NAMES)
    words = pick(rng, WORDS, 2)
    instruction = (f"Create a directory named {d}, move {name}.txt into it, and rename it there to "
                   f"{words[0]}.txt. {name}.txt must no longer exist in the top directory.")
    files = {f"{name}.txt": f"{words[1]}\n"}
    solution = f"mkdir -p {d} && mv {name}.txt {d}/{words[0]}.txt"
    check = (f"text_is({d + '/' + words[0] + '.txt'!r}, {words[1]!r})\n"
             f"check(not os.path.exists({name + '.txt'!r}), '{name}.txt should be gone')")
    return make(FAMILY, 3, "move", instruction=instruction, files=files, verify=check, solution=solution)


def _l4(rng: random.Random) -> TaskSpec:
    names = pick(rng, NAMES, 6)
    logs, tmps, keep = names[:2], names[2:4], names[4:]
    files = {f"{n}.log": f"{rng.choice(WORDS)}\n" for n in logs}
    files |= {f"{n}.tmp": "scratch\n" for n in tmps}
    files |= {f"{n}.txt": f"{rng.choice(WORDS)}\n" for n in keep}
    instruction = ("Tidy this directory: move every .log file into a new directory named logs, delete every "
                   ".tmp file, and leave the .txt files where they are.")
    solution = "mkdir -p logs && mv *.log logs/ && rm -f *.tmp"
    lines = [f"text_is({'logs/' + n + '.log'!r}, {files[n + '.log']!r})" for n in logs]
    lines += [f"check(not os.path.exists({n + '.tmp'!r}), '{n}.tmp should be deleted')" for n in tmps]
    lines += [f"check(not os.path.exists({n + '.log'!r}), '{n}.log should be moved')" for n in logs]
    lines += [f"text_is({n + '.txt'!r}, {files[n + '.txt']!r})" for n in keep]
    return make(FAMILY, 4, "tidy", instruction=instruction, files=files, verify="\n".join(lines), solution=solution)


def _l5(rng: random.Random) -> TaskSpec:
    exts = ["txt", "csv", "md"]
    names = pick(rng, NAMES, 7)
    files = {f"inbox/{n}.{rng.choice(exts)}": f"{rng.choice(WORDS)}\n" for n in names}
    instruction = ("Sort the files in inbox/ by extension: move each file into a top-level directory named "
                   "after its extension (for example inbox/a.txt goes to txt/a.txt). Then write manifest.txt "
                   "listing the new paths (like txt/a.txt), one per line, sorted alphabetically. inbox/ "
                   "must end up empty.")
    moved = sorted(f"{p.rsplit('.', 1)[1]}/{p.split('/', 1)[1]}" for p in files)
    solution = ("for f in inbox/*; do e=\"${f##*.}\"; mkdir -p \"$e\"; mv \"$f\" \"$e/\"; done\n"
                "ls */* | grep -v '^inbox/' | sort > manifest.txt")
    lines = [f"text_is({new!r}, {files['inbox/' + new.split('/', 1)[1]]!r})" for new in moved]
    lines.append(f"text_is('manifest.txt', {chr(10).join(moved)!r})")
    lines.append("check(os.path.isdir('inbox') and not os.listdir('inbox'), 'inbox/ should be empty')")
    return make(FAMILY, 5, "organise", instruction=instruction, files=files, verify="\n".join(lines),
                solution=solution, meta={"files": len(files)})


# --- operations (table-driven; see _ops.py) -----------------------------------------------------------
CORE = "GNU coreutils"


@op("files", "write-text", (1, 2, 3), f"{CORE}: printf / echo with quoting", "printf", [
    "Create {out} containing exactly this line: {line}",
    "Write the sentence \"{line}\" (without the surrounding quotes) into a new file {out}.",
    "{out} should hold one line of text: {line}",
    "Save this note to {out}, word for word: {line}",
], traps=("missing-dir",))
def _write(c: Ctx) -> Case:
    line = c.pick(["Don't forget: milk, eggs & bread!", "It's done; ship it (finally).",
                   "Meeting moved to 3pm -- room 'B'.", "Total: $42.50 (incl. tax)", "Q: why? A: because it's late.",
                   "Note to self: back up ~/photos before Friday!", "Use \"quotes\" carefully, it's tricky."])
    out = c.out(c.pick(["note.txt", "reminder.txt", "message.txt", "status.txt"]))
    return Case({}, lines_is(out, [line]), f"printf '%s\\n' {q(line)} > {q(out)}", dict(out=out, line=line))


@op("files", "append-line", (1, 2, 3), f"{CORE}: echo >>", "echo >>", [
    "Add the line \"{line}\" at the end of {src}, keeping what is already there.",
    "Append one more entry to {src}: {line}",
    "{src} needs a new last line: {line}. Don't lose the existing lines.",
    "Put \"{line}\" (no quotes) after the last line of {src}.",
], traps=("spaces",))
def _append(c: Ctx) -> Case:
    src, lines = c.src("txt"), sentences(c.rng, c.rng.randint(2, 5))
    line = sentence(c.rng)
    while line in lines:
        line = sentence(c.rng)
    return Case({src: text_of(lines)}, lines_is(src, lines + [line]), f"echo {q(line)} >> {q(src)}",
                dict(src=src, line=line))


@op("files", "copy-file", (1, 2, 3), f"{CORE}: cp", "cp", [
    "Make a copy of {src} called {out}; keep the original.",
    "Duplicate {src} as {out}.",
    "{out} should be an exact copy of {src}, and {src} must stay where it is.",
    "Back up {src} to {out}.",
], traps=("spaces", "missing-dir"))
def _cp(c: Ctx) -> Case:
    src, lines = c.src("txt"), sentences(c.rng, 3)
    out = c.out(src.replace(" ", "_").rsplit(".", 1)[0] + c.pick([".bak", "_copy.txt", ".orig"]))
    return Case({src: text_of(lines)}, lines_is(out, lines) + "\n" + lines_is(src, lines), f"cp {q(src)} {q(out)}",
                dict(src=src, out=out))


@op("files", "move-into-dir", (2, 3, 4), f"{CORE}: mkdir, mv", "mv", [
    "Move {src} into the directory {d}/ (create it if needed).",
    "{src} belongs in {d}/. Put it there; it should not remain in the top directory.",
    "Create the folder {d} and move {src} inside it.",
    "Relocate {src} to {d}/{src}.",
], traps=("spaces",))
def _mv(c: Ctx) -> Case:
    src, lines = c.src("txt"), sentences(c.rng, 3)
    d = c.pick(["archive", "done", "old", "2024", "backup"])
    return Case({src: text_of(lines)}, lines_is(f"{d}/{src}", lines) + "\n" + gone(src),
                f"mkdir -p {d} && mv {q(src)} {d}/", dict(src=src, d=d))


@op("files", "delete-by-extension", (2, 3, 4), f"{CORE}: rm with a glob", "rm", [
    "Delete every .{ext} file in this directory; leave all other files alone.",
    "Clean up: remove the .{ext} files here, nothing else.",
    "All files ending in .{ext} must go. Other files stay untouched.",
    "Get rid of the *.{ext} files in the current directory.",
])
def _rm(c: Ctx) -> Case:
    ext = c.pick(["tmp", "bak", "swp", "orig"])
    stems = c.pick(STEMS, 6)
    doomed = [f"{s}.{ext}" for s in stems[:3]]
    kept = [f"{s}.txt" for s in stems[3:5]] + [f"{stems[5]}.{ext}.keep"]
    files = {p: "x\n" for p in doomed} | {p: "keep me\n" for p in kept}
    verify = "\n".join([gone(p) for p in doomed] + [lines_is(p, ["keep me"]) for p in kept])
    return Case(files, verify, f"rm -f -- *.{ext}", dict(ext=ext))


@op("files", "copy-tree", (2, 3, 4), f"{CORE}: cp -r", "cp -r", [
    "Copy the whole directory {d}/ (with everything in it) to {out}/.",
    "Make a recursive copy of {d} named {out}; {d} stays as it is.",
    "{out}/ should be a full copy of the {d}/ tree, subdirectories included.",
    "Duplicate the folder {d} as {out}.",
])
def _cpr(c: Ctx) -> Case:
    d, out = c.pick([("site", "site_backup"), ("src", "src.orig"), ("docs", "docs-copy"), ("config", "config.bak")])
    files = {f"{d}/{n}": f"{sentence(c.rng)}\n"
             for n in ["index.txt", "sub/a.txt", "sub/deep/b.txt"][:c.rng.randint(2, 3)]}
    verify = "\n".join(lines_is(out + p[len(d):], [t.strip()]) + "\n" + lines_is(p, [t.strip()])
                       for p, t in files.items())
    return Case(files, verify, f"cp -r {d} {out}", dict(d=d, out=out))


@op("files", "symlink", (2, 3, 4), f"{CORE}: ln -s", "ln -s", [
    "Create a symbolic link named {link} that points to {target}.",
    "Make {link} a symlink to {target} (not a copy).",
    "{link} should be a soft link whose target is {target}.",
    "Link {target} under the name {link} with a symbolic link.",
])
def _ln(c: Ctx) -> Case:
    target = c.pick(["config/settings.ini", "releases/v2/app.txt", "data/current.csv"])
    link = c.pick(["current", "latest", "active"]) + "." + target.rsplit(".", 1)[1]
    verify = (f"check(os.path.islink({link!r}) and os.readlink({link!r}).rstrip('/').endswith({target!r}), "
              f"'{link} should be a symlink to {target}')\ncheck(os.path.isfile({link!r}), 'the link should resolve')")
    return Case({target: "value = 1\n"}, verify, f"ln -s {target} {link}", dict(target=target, link=link))


@op("files", "make-executable", (1, 2, 3), f"{CORE}: chmod", "chmod", [
    "Make {src} executable.",
    "{src} cannot be run yet: give it execute permission.",
    "Set the executable bit on {src} so `./{src}` works.",
    "Allow {src} to be executed (chmod it).",
])
def _chmod(c: Ctx) -> Case:
    src = c.pick(["deploy.sh", "backup.sh", "run.sh", "build.sh", "cleanup.sh"])
    verify = (f"check(os.access({src!r}, os.X_OK), '{src} should be executable')\n"
              + AGENT_RUN + f"r = run_as_agent(['./' + {src!r}])\n"
              f"check(r.stdout.strip() == 'ok', './{src} should print ok')")
    return Case({src: "#!/bin/bash\necho ok\n"}, verify, f"chmod +x {src}", dict(src=src))


@op("files", "rename-extension", (3, 4), "bash: for loop with ${f%.txt}", "mv", [
    "Rename every .{old} file in {d}/ to end in .{new} instead (notes.{old} becomes notes.{new}).",
    "In {d}/, change the extension of all .{old} files to .{new}.",
    "All *.{old} files under {d}/ should become *.{new}, same names otherwise, same contents.",
    "Switch the files in {d}/ from .{old} to .{new}.",
])
def _rename(c: Ctx) -> Case:
    d, (old, new) = c.pick(["docs", "notes", "pages"]), c.pick([("txt", "md"), ("jpeg", "jpg"), ("htm", "html")])
    stems = c.pick(STEMS, c.rng.randint(2, 4)) + ["meeting notes"]
    files = {f"{d}/{s}.{old}": f"{sentence(c.rng)}\n" for s in stems}
    verify = "\n".join(lines_is(p[: -len(old)] + new, [t.strip()]) + "\n" + gone(p) for p, t in files.items())
    return Case(files, verify, f"for f in {d}/*.{old}; do mv -- \"$f\" \"${{f%.{old}}}.{new}\"; done",
                dict(d=d, old=old, new=new), partial=f"for f in {d}/*.{old}; do ...")


@op("files", "count-files", (1, 2, 3), f"{CORE}: ls | wc -l", "ls", [
    "How many files are in the directory {d}? Write the number into {out}.",
    "Count the entries of {d}/ and save the count as {out}.",
    "{out} should contain the number of files inside {d}/.",
    "Write the file count of {d} to {out}.",
], traps=("missing-dir",))
def _count(c: Ctx) -> Case:
    d, n = c.pick(["uploads", "inbox", "photos", "cache"]), c.rng.randint(3, 9)
    files = {f"{d}/{s}.{c.pick(['txt', 'jpg', 'csv'])}": "x\n" for s in c.pick(STEMS, n)}
    out = c.out("count.txt")
    return Case(files, number_is(out, len(files)), f"ls {d} | wc -l > {q(out)}", dict(d=d, out=out))


@op("files", "concatenate", (1, 2, 3), f"{CORE}: cat", "cat", [
    "Concatenate {a}, {b} and {c} (in that order) into {out}.",
    "Join the three files {a}, {b}, {c} one after another into one file, {out}.",
    "{out} should contain {a}, then {b}, then {c}.",
    "Glue {a} + {b} + {c} together as {out}.",
], heldout=True)
def _cat(c: Ctx) -> Case:
    parts = c.pick(["jan.txt", "feb.txt", "mar.txt", "apr.txt", "may.txt"], 3)
    texts = [sentences(c.rng, 2) for _ in parts]
    out = c.pick(["all.txt", "combined.txt", "q1.txt"])
    return Case(dict(zip(parts, map(text_of, texts))), lines_is(out, texts[0] + texts[1] + texts[2]),
                f"cat {' '.join(parts)} > {out}", dict(a=parts[0], b=parts[1], c=parts[2], out=out))
