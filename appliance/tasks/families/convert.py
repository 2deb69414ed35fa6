"""Converting and reformatting: dates and Unix times, human-readable sizes, text encodings, wrapping and
joining lines, squeezing and deleting characters, repeated and unique lines, names and folders of paths,
numbered files and copies that keep their folders. Every level is table-driven (see _ops.py).

The operations come from a sweep of the GNU coreutils manual's chapters that the other families had left
out (fold, paste -s, numfmt, date -d, seq -w, tr -s / -d, uniq -d / -u, basename, dirname, cp --parents) and
glibc's iconv (which chapters were missing was read off the dev set's reference commands: docs/TASKS.md);
the requests are written here, never from the transfer dev set's wording. Expected
results are computed in Python; where more than one output is right (wrapping), the verifier checks
the property asked for, not one tool's bytes."""

from __future__ import annotations

import datetime as dt
import random

from appliance.tasks.families._ops import (
    IO,
    Case,
    Ctx,
    exact_is,
    generate_family,
    lines_is,
    number_is,
    op,
    q,
    sentences,
    text_of,
)
from appliance.tasks.format import TaskSpec

FAMILY = "convert"
DESCRIPTION = ("converting and reformatting: dates and Unix times, human-readable sizes, encodings, wrapping and "
               "joining lines, squeezing characters, repeated and unique lines, base names, numbered files")
CORE = "GNU coreutils"
ITEMS = ["apple", "bolt", "cable", "delta", "ember", "fjord", "grape", "harbor", "igloo", "jasper", "kettle",
         "lemon", "maple", "nickel", "orbit", "pepper", "quartz", "raven", "salmon", "tulip", "umber", "velvet"]


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint)


@op(FAMILY, "wrap-text", (2, 3, 4), f"{CORE}: fold -s", "fold -s -w", [
    "Rewrap the text of {src} to lines of at most {n} characters, breaking between words, and write it to {out}.",
    "{src} is one very long line. Make {out}: the same words, wrapped so that every line is {n} characters or "
    "shorter (never split a word).",
    "Wrap {src} at {n} columns on word boundaries; save the wrapped text as {out}.",
    "I need {src} reflowed for a {n}-column terminal, words kept whole: put the result in {out}.",
], traps=IO)
def _wrap(c: Ctx) -> Case:
    src = c.src("txt", ["message", "letter", "notice", "blurb", "announcement"])
    words = " ".join(sentences(c.rng, c.rng.randint(5, 9))).split()
    n, out = c.pick([40, 50, 60, 72]), c.out(c.pick(["wrapped.txt", "short-lines.txt", "folded.txt"]))
    verify = (f"_got = read({out!r}) or ''\n"
              f"check(_got.split() == {words!r}, {out!r} + ' should hold the same words in the same order')\n"
              f"check(all(len(x.rstrip()) <= {n} for x in _got.split(chr(10))), "
              f"'every line of ' + {out!r} + ' should be at most {n} characters')\n"
              f"check(_got.count(chr(10)) > 1, {out!r} + ' should be wrapped onto several lines')")
    return Case({src: " ".join(words) + "\n"}, verify, f"fold -s -w {n} {q(src)} > {q(out)}",
                dict(src=src, n=str(n), out=out))


@op(FAMILY, "join-lines", (1, 2, 3), f"{CORE}: paste -s -d", "paste -s", [
    "Put all the lines of {src} on a single line, separated by {sep}, in {out}.",
    "{out} should hold the entries of {src} joined into one line with {seps} between them.",
    "Merge the lines of {src} into one {sep_name}-separated line and write it to {out}.",
    "Turn the one-per-line list in {src} into a single line whose items are divided by {seps}; save it as {out}.",
], traps=IO)
def _join(c: Ctx) -> Case:
    src = c.src("txt", ["orders", "ids", "hosts", "tickets", "codes"])
    items = [str(x) for x in c.rng.sample(range(1000, 9999), c.rng.randint(4, 9))]
    sep, sep_name = c.pick([(",", "comma"), (";", "semicolon"), (":", "colon")])
    out = c.out(c.pick(["joined.txt", "one-line.txt", "list.csv"]))
    return Case({src: text_of(items)}, lines_is(out, [sep.join(items)]), f"paste -s -d {q(sep)} {q(src)} > {q(out)}",
                dict(src=src, sep=f"'{sep}'", seps=sep_name + "s", sep_name=sep_name, out=out))


UNITS = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}


@op(FAMILY, "sizes-to-bytes", (2, 3, 4), f"{CORE}: numfmt --from=iec", "numfmt", [
    "Each line of {src} is a size like 3K or 2.5M (binary units). Write the same sizes as plain byte counts to "
    "{out}, one per line.",
    "Convert the human-readable sizes in {src} (K, M and G are powers of 1024) to whole numbers of bytes in "
    "{out}, keeping their order.",
    "{out} should list the sizes from {src} in bytes (1K is 1024 bytes), line for line.",
    "Expand the K/M/G suffixes of the sizes listed in {src} into bytes (powers of 1024) and save the numbers "
    "in {out}.",
], traps=IO)
def _sizes(c: Ctx) -> Case:
    src = c.src("txt", ["limits", "quotas", "sizes", "disks"])
    shown, want = [], []
    for _ in range(c.rng.randint(4, 7)):
        unit = c.pick(["", "K", "M", "G"])
        whole = c.rng.randint(1, 900) if unit == "" else c.rng.randint(1, 64)
        half = unit != "" and c.rng.random() < 0.3
        shown.append(f"{whole}.5{unit}" if half else f"{whole}{unit}")
        want.append(str(int((whole + (0.5 if half else 0)) * UNITS.get(unit, 1))))
    out = c.out(c.pick(["bytes.txt", "in-bytes.txt", "raw.txt"]))
    return Case({src: text_of(shown)}, lines_is(out, want), f"numfmt --from=iec < {q(src)} > {q(out)}",
                dict(src=src, out=out))


DATE_FORMATS = [("YYYY-MM-DD", "+%F", "%Y-%m-%d"), ("DD.MM.YYYY", "+%d.%m.%Y", "%d.%m.%Y"),
                ("YYYY-MM-DD HH:MM", "+'%F %H:%M'", "%Y-%m-%d %H:%M")]


def _stamp(rng: random.Random) -> int:
    return rng.randint(978307200, 1893456000)  # 2001 to 2030


@op(FAMILY, "epoch-to-date", (3, 4), f"{CORE}: date -d @SECONDS", "date -u -d", [
    "Convert every Unix timestamp in {src} to its UTC calendar time (format {fmt}) and list them in {out}, "
    "line for line.",
    "{out}: for each epoch-seconds value in {src}, the matching UTC time as {fmt}.",
    "Turn the seconds-since-1970 numbers of {src} into {fmt} (UTC), written to {out} in the original order.",
    "Which moments (UTC) do the epoch times in {src} stand for? Answer in {out}, one {fmt} per input line.",
], traps=("spaces", "missing-dir"))
def _epoch(c: Ctx) -> Case:
    src = c.src("txt", ["stamps", "epochs", "events", "times"])
    stamps = [_stamp(c.rng) for _ in range(c.rng.randint(3, 6))]
    fmt, shell_fmt, py_fmt = c.pick(DATE_FORMATS)
    want = [dt.datetime.fromtimestamp(s, dt.UTC).strftime(py_fmt) for s in stamps]
    out = c.out(c.pick(["dates.txt", "readable.txt", "when.txt"]))
    solution = f'while read -r s; do date -u -d "@$s" {shell_fmt}; done < {q(src)} > {q(out)}'
    return Case({src: text_of([str(s) for s in stamps])}, lines_is(out, want), solution,
                dict(src=src, fmt=fmt, out=out))


@op(FAMILY, "date-add-days", (2, 3), f"{CORE}: date -d 'DATE N days'", "date -d", [
    "Put the date {n} days {way} {start} (as YYYY-MM-DD) in {out}.",
    "{out} should contain the calendar date that lies {n} days {way} {start}, formatted like {start}.",
    "Count {n} days {step} from {start} and save the resulting date in {out}, in the same format.",
    "Starting at {start}, step {n} days {step}; record the day you land on in {out} (ISO format).",
], traps=("missing-dir",))
def _add_days(c: Ctx) -> Case:
    start = dt.date(2024, 1, 1) + dt.timedelta(days=c.rng.randint(0, 1400))
    n, later = c.rng.randint(10, 250), c.rng.random() < 0.6
    want = start + dt.timedelta(days=n if later else -n)
    out = c.out(c.pick(["due.txt", "date.txt", "deadline.txt", "answer.txt"]))
    rel = f"+ {n} days" if later else f"{n} days ago"
    return Case({}, lines_is(out, [want.isoformat()]), f"date -u -d '{start.isoformat()} {rel}' +%F > {q(out)}",
                dict(start=start.isoformat(), n=str(n), way="after" if later else "before",
                     step="forward" if later else "back", out=out))


@op(FAMILY, "date-to-epoch", (1, 2, 3), f"{CORE}: date +%s", "date +%s", [
    "Write the Unix timestamp (seconds since 1970, UTC) of {when} UTC into {out}.",
    "{out} should hold {when} (UTC) as seconds since the epoch.",
    "Convert {when} UTC to epoch seconds and save the number in {out}.",
    "How many seconds after 1970-01-01 00:00 UTC is {when} UTC? Put the number in {out}.",
], traps=("missing-dir",))
def _to_epoch(c: Ctx) -> Case:
    stamp = _stamp(c.rng) // 60 * 60
    when = dt.datetime.fromtimestamp(stamp, dt.UTC).strftime("%Y-%m-%d %H:%M")
    out = c.out(c.pick(["epoch.txt", "seconds.txt", "stamp.txt"]))
    return Case({}, number_is(out, stamp), f"date -u -d '{when}' +%s > {q(out)}", dict(when=when, out=out))


@op(FAMILY, "numbered-files", (3, 4), f"{CORE}: seq -w", "seq -w", [
    "Create {n} empty files in {d}/ named {prefix}-01.{ext} through {prefix}-{n}.{ext} (zero-padded numbers). "
    "{d}/ may not exist yet.",
    "Set up {d}/ with the empty files {prefix}-01.{ext}, {prefix}-02.{ext}, ..., {prefix}-{n}.{ext}.",
    "In a new folder {d}, touch {prefix}-NN.{ext} for every NN from 01 to {n}.",
    "I want placeholder files {prefix}-01.{ext} ... {prefix}-{n}.{ext} (numbered with two digits, all empty) "
    "inside {d}/.",
])
def _numbered(c: Ctx) -> Case:
    n, d = c.rng.randint(10, 24), c.pick(["course", "album", "talk", "plan", "drafts"])
    prefix, ext = c.pick(["day", "week", "part", "track", "slide", "lesson", "unit"]), c.pick(["txt", "md", "csv"])
    names = [f"{prefix}-{i:02d}.{ext}" for i in range(1, n + 1)]
    verify = (f"check(os.path.isdir({d!r}) and sorted(os.listdir({d!r})) == {names!r}, "
              f"{d!r} + '/ should hold exactly ' + {names[0]!r} + ' to ' + {names[-1]!r} + ', found ' + "
              f"repr(sorted(os.listdir({d!r})) if os.path.isdir({d!r}) else None)[:300])\n"
              f"check(all(os.path.getsize(os.path.join({d!r}, x)) == 0 for x in {names!r} "
              f"if os.path.isfile(os.path.join({d!r}, x))), 'the files should be empty')")
    solution = f"mkdir -p {d}\nfor i in $(seq -w 1 {n}); do touch {d}/{prefix}-$i.{ext}; done"
    return Case({}, verify, solution, dict(n=str(n), d=d, prefix=prefix, ext=ext))


def _spaced_lines(c: Ctx) -> tuple[list[str], list[str]]:
    raw, want = [], []
    for s in sentences(c.rng, c.rng.randint(4, 7)):
        words = s.split()
        raw.append("".join(w + " " * (c.rng.choice([1, 1, 2, 3, 4]) if i < len(words) - 1 else 0)
                           for i, w in enumerate(words)))
        want.append(" ".join(words))
    if raw == want:
        raw[0] = raw[0].replace(" ", "   ", 1)
    return raw, want


@op(FAMILY, "squeeze-spaces", (1, 2, 3), f"{CORE}: tr -s", "tr -s", [
    "Collapse every run of spaces in {src} to a single space and write the result to {out}.",
    "{src} has words separated by several spaces here and there. Save a copy with single spaces only as {out}.",
    "Make {out} from {src} with repeated blanks squeezed into one.",
    "Normalise the spacing of {src}: wherever two or more spaces follow each other, keep one. Output: {out}.",
], traps=IO)
def _squeeze_spaces(c: Ctx) -> Case:
    src = c.src("txt")
    raw, want = _spaced_lines(c)
    out = c.out(c.pick(["tidy.txt", "single-spaced.txt", "clean.txt"]))
    return Case({src: text_of(raw)}, exact_is(out, text_of(want)), f"tr -s ' ' < {q(src)} > {q(out)}",
                dict(src=src, out=out))


def _repeats_case(c: Ctx, flag: str, outs: list[str]) -> Case:
    """Lines in no order where some repeat; the output is the repeated ones (`uniq -d`) or the ones seen
    once (`uniq -u`), sorted."""
    src = c.src("txt", ["signups", "entries", "names", "votes"])
    pool = c.pick(ITEMS, c.rng.randint(6, 10))
    twice = pool[: c.rng.randint(2, 4)]
    lines = pool + twice + c.pick(twice, 1)
    c.rng.shuffle(lines)
    want = sorted(twice) if flag == "-d" else sorted(set(pool) - set(twice))
    out = c.out(c.pick(outs))
    return Case({src: text_of(lines)}, lines_is(out, want), f"sort {q(src)} | uniq {flag} > {q(out)}",
                dict(src=src, out=out))


@op(FAMILY, "repeated-lines", (2, 3, 4), f"{CORE}: uniq -d", "uniq -d", [
    "Which lines of {src} are repeated? Save those lines (one copy each, sorted) in {out}.",
    "List the duplicated entries of {src} in {out}: each one once, in sorted order.",
    "{out} should contain, sorted, every line that {src} has at least twice.",
    "Find the duplicates in {src}: each line that shows up two or more times goes once into {out}, "
    "alphabetically.",
], traps=IO)
def _repeated(c: Ctx) -> Case:
    return _repeats_case(c, "-d", ["dupes.txt", "repeated.txt", "twice.txt"])


@op(FAMILY, "unique-lines", (2, 3, 4), f"{CORE}: uniq -u", "uniq -u", [
    "Write the lines of {src} that occur exactly once (none of the repeated ones) to {out}, sorted.",
    "{out} should list, in sorted order, only the entries of {src} that have no duplicate.",
    "Drop every line of {src} that appears more than one time, entirely; keep the rest, sorted, in {out}.",
    "Which entries are unique in {src} (seen a single time)? Sorted, into {out}.",
], traps=IO)
def _unique(c: Ctx) -> Case:
    return _repeats_case(c, "-u", ["single.txt", "unique.txt", "once.txt"])


DIRS = ["src", "docs", "assets/img", "lib/util", "var/log", "home/ann/music", "build/out", "config"]


def _path_case(c: Ctx, tool: str, outs: list[str]) -> Case:
    """A list of paths and, in the output, each one's basename or dirname (`tool`)."""
    src = c.src("txt", ["paths", "files", "manifest", "listing"])
    paths = [f"/{c.pick(DIRS)}/{c.pick(ITEMS)}{c.rng.randint(1, 99)}.{c.pick(['txt', 'png', 'py', 'log', 'mp3'])}"
             if c.rng.random() < 0.5 else f"{c.pick(DIRS)}/{c.pick(ITEMS)}.{c.pick(['md', 'conf', 'sh'])}"
             for _ in range(c.rng.randint(4, 7))]
    out = c.out(c.pick(outs))
    want = [p.rsplit("/", 1)[1 if tool == "basename" else 0] for p in paths]
    return Case({src: text_of(paths)}, lines_is(out, want), f"xargs -n 1 {tool} < {q(src)} > {q(out)}",
                dict(src=src, out=out))


@op(FAMILY, "base-names", (1, 2, 3), f"{CORE}: basename", "basename", [
    "{src} lists file paths. Write just the file name of each (the part after the last slash) to {out}.",
    "Strip the directories from the paths in {src}, keeping only the base names, into {out}.",
    "Make {out}: for every path in {src}, its last component.",
    "I only need the names, not the folders: turn each path of {src} into its basename and save them as {out}.",
], traps=IO)
def _base_names(c: Ctx) -> Case:
    return _path_case(c, "basename", ["names.txt", "basenames.txt", "filenames.txt"])


@op(FAMILY, "parent-dirs", (2, 3), f"{CORE}: dirname", "dirname", [
    "For every path listed in {src}, write the folder it is in (everything before the last slash) to {out}.",
    "{out} should have the directory part of each path in {src}, one line per path, same order.",
    "Cut the file names off the paths in {src} so only their directories remain; save that as {out}.",
    "Which directory holds each of the files listed in {src}? One answer per path, into {out}.",
], traps=IO)
def _parent_dirs(c: Ctx) -> Case:
    return _path_case(c, "dirname", ["dirs.txt", "folders.txt", "parents.txt"])


@op(FAMILY, "delete-digits", (1, 2, 3), f"{CORE}: tr -d", "tr -d", [
    "Remove every digit from {src} and save what is left as {out}.",
    "{out} should be {src} with all the characters 0 to 9 deleted and everything else unchanged.",
    "Strip the numerals out of the text in {src}; write the result to {out}.",
    "I want {src} without any digits in it: put that version in {out}.",
], traps=IO)
def _delete_digits(c: Ctx) -> Case:
    src = c.src("txt", ["labels", "codes", "notes", "tickets"])
    lines = [f"{c.pick(ITEMS)}{c.rng.randint(1, 999)} {c.pick(ITEMS)}-{c.rng.randint(10, 99)}x{c.rng.randint(1, 9)}"
             for _ in range(c.rng.randint(4, 7))]
    out = c.out(c.pick(["no-digits.txt", "letters.txt", "stripped.txt"]))
    want = ["".join(ch for ch in x if not ch.isdigit()) for x in lines]
    return Case({src: text_of(lines)}, exact_is(out, text_of(want)), f"tr -d '0-9' < {q(src)} > {q(out)}",
                dict(src=src, out=out))


ACCENTED = ["Café Müller opens at nine.", "Zoë's naïve résumé arrived.", "Señor Peña paid 30 €.",
            "Ångström wrote the façade report.", "Crème brûlée for Mrs Øster.", "The São Paulo office is closed.",
            "Renée and Jürgen moved to Zürich.", "Ça va? Très bien, merci."]


@op(FAMILY, "latin1-to-utf8", (2, 3, 4), "glibc: iconv -f ISO-8859-1 -t UTF-8", "iconv", [
    "Re-encode {src} (ISO-8859-1, also called Latin-1) as UTF-8 and save it as {out}.",
    "Convert {src} from Latin-1 to UTF-8; the converted text goes in {out}, the original stays.",
    "{out} should be {src} re-encoded as UTF-8 (it is Latin-1 now).",
    "Produce {out}: the text of {src}, which is stored as ISO-8859-1, converted to UTF-8 so the accents display.",
])
def _latin1(c: Ctx) -> Case:
    src = c.src("txt", ["legacy", "customers", "import", "old-notes"])
    lines = [s for s in c.pick(ACCENTED, c.rng.randint(3, 5)) if "€" not in s] or [ACCENTED[0]]
    out = c.out(c.pick(["utf8.txt", "converted.txt", f"{src[:-4]}-utf8.txt"]))
    setup = f"iconv -f UTF-8 -t ISO-8859-1 {q(src + '.utf8')} > {q(src)}\nrm -f {q(src + '.utf8')}\n"
    return Case({src + ".utf8": text_of(lines)}, exact_is(out, text_of(lines)),
                f"iconv -f ISO-8859-1 -t UTF-8 < {q(src)} > {q(out)}", dict(src=src, out=out), setup=setup)


@op(FAMILY, "copy-keeping-dirs", (2, 3, 4), f"{CORE}: cp --parents", "cp --parents", [
    "Copy {p1} and {p2} into {dest}/, recreating their folder paths there ({dest}/{p1} and so on).",
    "Back up {p1} and {p2} to {dest}/ with their directories kept: {dest}/{p1}, {dest}/{p2}.",
    "{dest}/ should get copies of {p1} and {p2} at the same relative paths; leave the originals.",
    "Mirror just two files, {p1} and {p2}, under {dest}/ (paths preserved, e.g. {dest}/{p1}).",
])
def _parents(c: Ctx) -> Case:
    dirs = c.pick(["app/config", "lib/core", "web/static", "scripts/db", "src/api"], 3)
    names = c.pick(["settings.yml", "main.py", "style.css", "seed.sql", "routes.py", "util.sh"], 3)
    files = {f"{d}/{n}": f"# {n} in {d}\nvalue = {c.rng.randint(1, 99)}\n" for d, n in zip(dirs, names, strict=True)}
    p1, p2 = sorted(files)[:2]
    dest = c.pick(["backup", "snapshot", "saved"])
    verify = "\n".join(f"text_is({dest + '/' + p!r}, {files[p]!r})\ntext_is({p!r}, {files[p]!r})" for p in (p1, p2))
    verify += (f"\n_extra = [os.path.join(r, f) for r, _, fs in os.walk({dest!r}) for f in fs]\n"
               f"check(len(_extra) == 2, {dest!r} + '/ should hold just the two copies, found ' + repr(_extra)[:300])")
    return Case(files, verify, f"cp --parents {q(p1)} {q(p2)} {dest}/", dict(p1=p1, p2=p2, dest=dest),
                setup=f"mkdir -p {dest}\n")

