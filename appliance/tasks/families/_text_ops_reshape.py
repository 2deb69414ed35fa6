"""The text family's operations (table rows, see _ops.py), part two: counting, reshaping, combining and
encoding text (part one, _text_ops_lines.py, registers before these)."""

from __future__ import annotations

import base64
import hashlib

from appliance.tasks.families._ops import (
    CITIES,
    FULL_NAMES,
    IO,
    PRODUCTS,
    Case,
    Ctx,
    exact_is,
    lines_is,
    number_is,
    op,
    q,
    sentences,
    text_of,
)
from appliance.tasks.families._text_ops_lines import CORE, sentences_file


@op("text", "count-words", (1, 2, 3), f"{CORE}: wc -w", "wc -w", [
    "How many words are in {src}? Write only the number into {out}.",
    "Count the words (whitespace-separated) of {src} and save the count to {out}.",
    "{out} should contain the word count of {src}, as a bare number.",
    "Store the total number of words in {src} in {out}.",
], traps=IO)
def _wc_w(c: Ctx) -> Case:
    src, lines = sentences_file(c, 3, 8)
    out = c.out("words.txt")
    text = text_of(lines)
    return Case({src: text}, number_is(out, len(text.split())), f"wc -w < {q(src)} > {q(out)}",
                dict(src=src, out=out))


@op("text", "count-bytes", (1, 2, 3), f"{CORE}: wc -c", "wc -c", [
    "Write the size of {src} in bytes (just the number) into {out}.",
    "How many bytes long is {src}? Save the answer in {out}.",
    "{out} should hold {src}'s byte count.",
    "Measure {src} in bytes and put the number in {out}.",
], traps=("spaces", "missing-dir"))
def _wc_c(c: Ctx) -> Case:
    src, lines = sentences_file(c, 2, 6)
    out = c.out("size.txt")
    text = text_of(lines)
    return Case({src: text}, number_is(out, len(text.encode())), f"wc -c < {q(src)} > {q(out)}",
                dict(src=src, out=out))


@op("text", "strip-trailing-space", (3, 4), "GNU sed: s/[[:space:]]*$//", "sed -i", [
    "Remove the trailing spaces and tabs at the ends of the lines of {src} (edit it in place).",
    "{src} has whitespace at the end of some lines. Clean it up in place; nothing else may change.",
    "Strip end-of-line whitespace from {src}, keeping the text and line breaks otherwise identical.",
    "Edit {src} so that no line ends in a space or a tab.",
], traps=("spaces",))
def _strip(c: Ctx) -> Case:
    src, lines = sentences_file(c, 4, 7)
    dirty = [x + c.pick(["", "  ", "\t", " \t ", " "]) for x in lines]
    dirty[0] += "   "
    return Case({src: text_of(dirty)}, exact_is(src, text_of(lines)), f"sed -i 's/[[:space:]]*$//' {q(src)}",
                dict(src=src))


@op("text", "squeeze-blank", (2, 3, 4), f"{CORE}: cat -s", "cat -s", [
    "{src} has runs of several blank lines. Write it to {out} with each run squeezed into a single blank line.",
    "Collapse repeated empty lines in {src} to one empty line and save the result as {out}.",
    "{out} should be {src} but never with two blank lines in a row.",
    "Squeeze the blank lines of {src} (many in a row become one), output in {out}.",
], traps=IO)
def _squeeze(c: Ctx) -> Case:
    src, lines = sentences_file(c, 4, 6)
    raw: list[str] = []
    for x in lines:
        raw += [x] + [""] * c.rng.randint(1, 3)
    raw = raw[:-1] + ["", ""]
    want: list[str] = []
    for x in raw:
        if not (x == "" and want and want[-1] == ""):
            want.append(x)
    out = c.out("squeezed.txt")
    return Case({src: text_of(raw)}, exact_is(out, text_of(want)), f"cat -s {q(src)} > {q(out)}",
                dict(src=src, out=out))


@op("text", "reverse-characters", (1, 2, 3), "util-linux: rev", "rev", [
    "Reverse the characters of every line of {src} ('abc' becomes 'cba') and write the result to {out}.",
    "{out} should hold each line of {src} spelled backwards, lines in the same order.",
    "Mirror each line of {src} character by character into {out}.",
    "Write {src} to {out} with the text of each line reversed (the line order stays).",
], traps=IO)
def _rev(c: Ctx) -> Case:
    src, lines = sentences_file(c, 3, 5)
    out = c.out("mirrored.txt")
    return Case({src: text_of(lines)}, lines_is(out, [x[::-1] for x in lines]), f"rev {q(src)} > {q(out)}",
                dict(src=src, out=out))


@op("text", "align-columns", (3, 4), "util-linux: column -t (absent here: awk or python3 instead)", "awk", [
    "{src} has whitespace-separated columns of uneven width. Write {out} with the columns aligned: each "
    "column padded with spaces to its widest entry, two spaces between columns, no trailing spaces.",
    "Pretty-print the table {src} into {out} the way `column -t` does (left-aligned, 2-space gaps).",
    "Line up the fields of {src} in neat columns in {out}: pad each field to the column's width, separate "
    "columns by two spaces, and do not pad the last column.",
    "Make {src} readable: {out} should show its columns aligned (two spaces between, like column -t).",
], traps=("absent",), absent="column")
def _column(c: Ctx) -> Case:
    src, out = c.src("txt", ["table", "hosts", "stock", "usage"]), c.out("aligned.txt")
    rows = [["NAME", "CITY", "SCORE"]] + [[n.split()[0], c.pick(CITIES), str(c.rng.randint(1, 9999))]
                                         for n in c.pick(FULL_NAMES, c.rng.randint(3, 6))]
    widths = [max(len(r[k]) for r in rows) for k in range(3)]
    want = ["  ".join(r[k].ljust(widths[k]) for k in range(2)) + "  " + r[2] for r in rows]
    code = ("import sys\nrows = [l.split() for l in open(sys.argv[1]) if l.strip()]\n"
            "w = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]\n"
            "for r in rows: print('  '.join(f.ljust(w[k]) for k, f in enumerate(r)).rstrip())")
    return Case({src: text_of([" ".join(r) for r in rows])}, lines_is(out, want) + "\n" + exact_is(out, text_of(want)),
                f"python3 -c {q(code)} {q(src)} > {q(out)}", dict(src=src, out=out),
                partial="python3 -c 'import sys ...")


@op("text", "crlf-to-lf", (2, 3, 4), "dos2unix (absent here: sed or tr instead)", "sed", [
    "{src} has Windows line endings (CRLF). Convert it in place to Unix line endings (LF).",
    "Strip the carriage returns from the line ends of {src}; edit the file itself.",
    "Make {src} a Unix text file: every \\r\\n should become \\n.",
    "Fix {src}'s DOS line endings in place.",
], traps=("absent", "spaces"), absent="dos2unix")
def _crlf(c: Ctx) -> Case:
    src, lines = sentences_file(c, 3, 6)
    want = text_of(lines)
    verify = (f"got = open({src!r}, 'rb').read() if os.path.exists({src!r}) else b''\n"
              f"check(got == {want.encode()!r}, '{src} should have LF line endings and the same text, found '"
              " + repr(got[:200]))")
    return Case({src: want.replace("\n", "\r\n")}, verify, f"sed -i 's/\\r$//' {q(src)}", dict(src=src))


@op("text", "sort-in-place", (2, 3, 4), "GNU coreutils: sort -o (`sort f > f` empties f)", "sort -o", [
    "Sort {src} in place: the file itself should end up with its lines in alphabetical order.",
    "Alphabetise the lines of {src}, overwriting {src} (no other file should be needed).",
    "{src} must be sorted (byte order), and keep all of its lines.",
    "Reorder {src} so its lines are sorted; save the result back into {src}.",
], traps=("absent", "spaces"), absent="sponge")
def _sort_inplace(c: Ctx) -> Case:
    src, lines = sentences_file(c, 5, 8)
    return Case({src: text_of(lines)}, lines_is(src, sorted(lines)), f"sort -o {q(src)} {q(src)}", dict(src=src))


@op("text", "run-python-script", (2, 3, 4), "Python: running a script with python3 (`python` is absent)", "python3", [
    "Run the Python script {script}; it writes {out}.",
    "Produce {out} by running {script}.",
    "{out} is made by the script {script}: run it.",
    "Execute {script} so that {out} exists.",
], traps=("absent",), absent="python")
def _python(c: Ctx) -> Case:
    script, out = c.pick(["make_report.py", "build_index.py", "summarise.py"]), c.pick(["report.txt", "index.txt"])
    n = c.rng.randint(2, 9)
    body = f"with open({out!r}, 'w') as f:\n    for i in range(1, {n + 1}):\n        f.write(f'line {{i}} of {n}\\n')\n"
    return Case({script: body}, lines_is(out, [f"line {i} of {n}" for i in range(1, n + 1)]), f"python3 {script}",
                dict(script=script, out=out))


@op("text", "paste-columns", (2, 3, 4), f"{CORE}: paste", "paste", [
    "{a} and {b} have the same number of lines. Write {out} where line N is line N of {a}, a comma, and line N of {b}.",
    "Join {a} and {b} side by side with a comma between them into {out}.",
    "Combine the two lists {a} (left) and {b} (right) line by line, separated by ',', and save as {out}.",
    "{out}: each line is `<{a} line>,<{b} line>`.",
])
def _paste(c: Ctx) -> Case:
    n = c.rng.randint(3, 6)
    left, right = c.pick(FULL_NAMES, n), [c.pick(CITIES) for _ in range(n)]
    a, b = c.pick([("names.txt", "cities.txt"), ("people.txt", "places.txt"), ("who.txt", "where.txt")])
    out = c.pick(["pairs.csv", "joined.txt", "merged.csv"])
    return Case({a: text_of(left), b: text_of(right)}, lines_is(out, [f"{x},{y}" for x, y in zip(left, right)]),
                f"paste -d, {a} {b} > {out}", dict(a=a, b=b, out=out))


@op("text", "common-lines", (2, 3, 4), f"{CORE}: comm -12", "comm", [
    "Write the lines that appear in both {a} and {b} to {out}, sorted.",
    "Which entries are in {a} and also in {b}? List them (sorted) in {out}.",
    "{out} should hold the intersection of the two sorted lists {a} and {b}.",
    "Find the names common to {a} and {b}; save them, one per line in sorted order, as {out}.",
])
def _comm(c: Ctx) -> Case:
    pool = c.pick(FULL_NAMES, 10)
    shared, only_a, only_b = pool[:3], pool[3:6], pool[6:9]
    a, b = c.pick([("monday.txt", "tuesday.txt"), ("team_a.txt", "team_b.txt"), ("old.txt", "new.txt")])
    out = c.pick(["both.txt", "common.txt", "overlap.txt"])
    return Case({a: text_of(sorted(shared + only_a)), b: text_of(sorted(shared + only_b))},
                lines_is(out, sorted(shared)), f"comm -12 {a} {b} > {out}", dict(a=a, b=b, out=out))


@op("text", "only-in-first", (3, 4), f"{CORE}: comm -23", "comm", [
    "Write the lines of {a} that are not in {b} to {out}, sorted.",
    "Who is on {a} but missing from {b}? Put those lines (sorted) in {out}.",
    "{out} = the sorted set difference {a} minus {b}.",
    "Compare the lists {a} and {b}; {out} gets only the entries unique to {a}.",
])
def _comm23(c: Ctx) -> Case:
    pool = c.pick(FULL_NAMES, 9)
    shared, only_a, only_b = pool[:3], pool[3:6], pool[6:9]
    a, b = c.pick([("invited.txt", "replied.txt"), ("all.txt", "done.txt"), ("before.txt", "after.txt")])
    out = c.pick(["missing.txt", "diff.txt", "todo.txt"])
    return Case({a: text_of(sorted(shared + only_a)), b: text_of(sorted(shared + only_b))},
                lines_is(out, sorted(only_a)), f"comm -23 {a} {b} > {out}", dict(a=a, b=b, out=out))


@op("text", "cut-characters", (2, 3, 4), f"{CORE}: cut -c", "cut -c", [
    "Write the first {n} characters of each line of {src} to {out}.",
    "Truncate every line of {src} to {n} characters and save as {out}.",
    "{out} should hold each line of {src} cut down to its first {n} characters.",
    "Keep only characters 1-{n} of each line in {src}; the result goes to {out}.",
], traps=IO)
def _cut_c(c: Ctx) -> Case:
    src, lines = sentences_file(c, 3, 6)
    n, out = c.rng.randint(5, 12), c.out("short.txt")
    return Case({src: text_of(lines)}, lines_is(out, [x[:n] for x in lines]), f"cut -c1-{n} {q(src)} > {q(out)}",
                dict(src=src, out=out, n=str(n)))


@op("text", "expand-tabs", (3, 4), f"{CORE}: expand", "expand", [
    "Replace the tabs in {src} with spaces (tab stops every {n} columns) and write it to {out}.",
    "{out} should be {src} with its tab characters expanded to spaces, {n}-column tab stops.",
    "Convert {src} from tabs to spaces, tab width {n}, into {out}.",
    "Expand every tab of {src} to spaces so columns line up at multiples of {n}; save as {out}.",
], traps=IO)
def _expand(c: Ctx) -> Case:
    src, out, n = c.src("tsv", ["table", "stock", "orders"]), c.out("aligned.txt"), c.pick([4, 8])
    lines = [f"{c.pick(FULL_NAMES)}\t{c.pick(PRODUCTS)}\t{c.rng.randint(1, 99)}" for _ in range(c.rng.randint(3, 5))]
    return Case({src: text_of(lines)}, exact_is(out, text_of([x.expandtabs(n) for x in lines])),
                f"expand -t {n} {q(src)} > {q(out)}", dict(src=src, out=out, n=str(n)))


@op("text", "checksum", (2, 3, 4), f"{CORE}: sha256sum", "sha256sum", [
    "Write the SHA-256 checksum of {src} (only the 64 hex digits) into {out}.",
    "Compute {src}'s sha256 hash and store just the hash in {out}.",
    "{out} should contain the hex SHA-256 digest of {src}, without the file name.",
    "Fingerprint {src} with SHA-256; put the bare digest in {out}.",
], traps=("spaces", "missing-dir"))
def _sha(c: Ctx) -> Case:
    src, lines = sentences_file(c, 2, 5)
    out, text = c.out(c.pick(["sha256.txt", "checksum.txt", "digest.txt"])), text_of(lines)
    return Case({src: text}, number_is(out, hashlib.sha256(text.encode()).hexdigest()),
                f"sha256sum {q(src)} | cut -d' ' -f1 > {q(out)}", dict(src=src, out=out))


@op("text", "base64-decode", (2, 3, 4), f"{CORE}: base64 -d", "base64", [
    "{src} is base64-encoded. Decode it into {out}.",
    "Write the decoded contents of the base64 file {src} to {out}.",
    "{out} should hold what {src} says once the base64 is decoded.",
    "Undo the base64 encoding of {src} and save the plain text as {out}.",
], traps=IO)
def _b64(c: Ctx) -> Case:
    src, lines = c.src("b64", ["secret", "message", "payload", "blob"]), sentences(c.rng, c.rng.randint(1, 3))
    out = c.out("decoded.txt")
    return Case({src: base64.encodebytes(text_of(lines).encode()).decode()}, lines_is(out, lines),
                f"base64 -d {q(src)} > {q(out)}", dict(src=src, out=out))


@op("text", "seq-numbers", (1, 2, 3), f"{CORE}: seq", "seq", [
    "Write the whole numbers from {a} to {b}, one per line, into {out}.",
    "{out} should count from {a} up to {b}, each number on its own line.",
    "Create {out} listing {a}, {a}+1, ..., {b} (one per line).",
    "Fill {out} with the integers {a} through {b} inclusive, one per line.",
], traps=("missing-dir",))
def _seq(c: Ctx) -> Case:
    a = c.rng.randint(1, 20)
    b, out = a + c.rng.randint(3, 12), c.out(c.pick(["numbers.txt", "ids.txt", "range.txt"]))
    return Case({}, lines_is(out, [str(i) for i in range(a, b + 1)]), f"seq {a} {b} > {q(out)}",
                dict(a=str(a), b=str(b), out=out))


@op("text", "split-lines", (3, 4), f"{CORE}: split", "split", [
    "Split {src} into pieces of {n} lines each, named {prefix}aa, {prefix}ab, ... (the way `split` names them).",
    "Cut {src} into files of at most {n} lines: {prefix}aa gets the first {n}, {prefix}ab the next {n}, and so on.",
    "Break {src} up into {n}-line chunks called {prefix}aa, {prefix}ab, ...",
    "Chunk {src} every {n} lines into files whose names start with {prefix} followed by aa, ab, ...",
], traps=("spaces", "gzip"))
def _split(c: Ctx) -> Case:
    src, lines = sentences_file(c, 7, 11)
    n, prefix = c.rng.randint(2, 4), c.pick(["part_", "chunk-", "piece."])
    chunks = [lines[i:i + n] for i in range(0, len(lines), n)]
    names = [prefix + "a" + chr(ord("a") + i) for i in range(len(chunks))]
    verify = "\n".join(lines_is(nm, ch) for nm, ch in zip(names, chunks))
    verify += f"\ncheck(not os.path.exists({prefix + 'a' + chr(ord('a') + len(chunks))!r}), 'one chunk too many')"
    return Case({src: text_of(lines)}, verify, f"split -l {n} {q(src)} {prefix}",
                dict(src=src, n=str(n), prefix=prefix))
