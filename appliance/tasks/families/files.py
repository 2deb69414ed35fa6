"""Files and directories: create, copy, move, delete, organise."""

from __future__ import annotations

import random

from appliance.tasks.families._common import NAMES, WORDS, make, pick, spelled_out
from appliance.tasks.format import TaskSpec

FAMILY = "files"
DESCRIPTION = "create, copy, move and delete files and directories"


def generate(level: int, rng: random.Random) -> TaskSpec:
    return [_l1, _l2, _l3, _l4, _l5][level - 1](rng)


def _l1(rng: random.Random) -> TaskSpec:
    name, word = rng.choice(NAMES), rng.choice(WORDS)
    kind = rng.choice(["echo", "mkdir", "copy"])
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
