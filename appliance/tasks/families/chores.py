"""Chores: a few steps whose outputs feed each other (unpack then count, gather then list, filter then sort then
take the top N, merge then count, select then bundle). Every level is table-driven (see _ops.py).

The reference solution is the composed commands; the verifier checks the final state and, where there is
one, the intermediate result (the unpacked files, the moved files, the merged list)."""

from __future__ import annotations

import random

from appliance.tasks.families._common import PEOPLE, WORDS
from appliance.tasks.families._kinds import answer_is
from appliance.tasks.families._ops import (
    Case,
    Ctx,
    generate_family,
    gone,
    lines_is,
    log_lines,
    op,
    q,
    sentence,
    text_of,
)
from appliance.tasks.format import TaskSpec

FAMILY = "chores"
DESCRIPTION = ("multi-step chores where one step feeds the next: unpack then count, gather then list, filter "
               "then sort then top N, merge then count, select then bundle")
LETTERS = ["alpha", "bravo", "delta", "echo", "golf", "hotel", "india", "kilo", "lima", "mike", "oscar", "papa",
           "romeo", "sierra", "tango", "victor", "whisky", "yankee", "zulu"]


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint)


@op("chores", "chore-unpack-count", (2, 3, 4), "GNU tar -xzf, then grep -c over the files", "tar", [
    "Unpack {arch} and count the {level} lines across all the logs in it; write the count to {out}.",
    "Support sent over {arch} with last week's logs. Could you unpack it here and tell me how many {level} lines "
    "there are in total, across every log in it? The number goes in {out}.",
    "extract {arch} then count how many lines in the extracted logs are {level} - total into {out}",
    "After this, the logs from {arch} should be unpacked here, and {out} should hold how many {level} lines they "
    "contain altogether.",
])
def _unpack_count(c: Ctx) -> Case:
    arch = c.pick(["logs-2024-03.tar.gz", "server-logs.tar.gz", "support-bundle.tgz"])
    d, level = c.pick(["logs", "var-log", "bundle"]), c.pick(["ERROR", "WARN"])
    files, n = {}, 0
    for name in c.pick(["api", "worker", "web", "cron", "db"], c.rng.randint(2, 4)):
        lines = log_lines(c.rng, c.rng.randint(4, 9))
        if not any(f" {level} " in ln for ln in lines):
            lines[0] = lines[0].replace(lines[0].split(" ")[2], level, 1)
        n += sum(f" {level} " in ln for ln in lines)
        files[f"{d}/{name}.log"] = text_of(lines)
    out = c.pick(["count.txt", f"{level.lower()}s.txt", "total.txt"])
    verify = "\n".join([f"text_is({p!r}, {t!r})" for p, t in files.items()] + [answer_is(out, str(n))])
    return Case(files, verify, f"tar -xzf {arch}\ncat {d}/*.log | grep -c ' {level} ' > {out}",
                dict(arch=arch, level=level, out=out), setup=f"tar -czf {arch} {d}\nrm -r {d}\n")


@op("chores", "chore-gather-list", (2, 3, 4), "GNU findutils: find -exec mv, then ls", "find", [
    "Move every .{ext} file from anywhere under {d}/ into {dest}/, then write the names of the moved files "
    "(sorted, one per line) to {lst}.",
    "My {d} folder is a mess: there are .{ext} files scattered through its subfolders. Please collect all of "
    "them into a {dest}/ folder at the top, and afterwards list what ended up there in {lst} (just the file "
    "names, alphabetical). Everything else stays where it is.",
    "gather all the .{ext} files under {d}/ (subfolders too) into {dest}/ and put a sorted list of there names "
    "in {lst}",
    "Every .{ext} file from {d}/ should end up directly in {dest}/, other files untouched, and {lst} should list "
    "their names alphabetically.",
])
def _gather(c: Ctx) -> Case:
    d, ext = c.pick(["inbox", "downloads", "desktop"]), c.pick(["pdf", "jpg", "csv"])
    dest = {"pdf": c.pick(["docs", "pdfs"]), "jpg": c.pick(["photos", "pictures"]),
            "csv": c.pick(["data", "tables"])}[ext]
    lst = c.pick(["moved.txt", "list.txt", "index.txt"])
    names = c.pick(LETTERS, c.rng.randint(3, 5))
    subs = ["", "2024/", "misc/", "old/stuff/"]
    hits = {f"{d}/{c.pick(subs)}{n}.{ext}": f"{sentence(c.rng)}\n" for n in names}
    rest = {f"{d}/{c.pick(subs)}{n}.{e}": f"{sentence(c.rng)}\n"
            for n, e in zip(c.pick(WORDS, 3), ["txt", "docx", "md"], strict=True)}
    verify = "\n".join([f"text_is({dest + '/' + p.rsplit('/', 1)[1]!r}, {t!r})\n" + gone(p) for p, t in hits.items()]
                       + [f"text_is({p!r}, {t!r})" for p, t in rest.items()]
                       + [lines_is(lst, sorted(f"{n}.{ext}" for n in names))])
    return Case(hits | rest, verify,
                f"mkdir -p {dest}\nfind {d} -name '*.{ext}' -exec mv {{}} {dest}/ \\;\nls {dest} > {lst}",
                dict(d=d, ext=ext, dest=dest, lst=lst))


@op("chores", "chore-csv-top", (2, 3, 4), "GNU awk filter, then sort -t, -k -nr, head, cut", "sort", [
    "From {src}, take the {region} orders, find the {n} with the highest {total}, and write their {idcol}s, "
    "highest first, one per line, to {out}.",
    "For the regional review I need the top {n} orders from {region} in {src}, ranked by {total} (biggest "
    "first). Could you put just their {idcol} values, one per line, into {out}? Other regions don't matter here.",
    "top {n} {region} orders by {total} from {src} -> {out}, only the {idcol}s, largest first",
    "{out} should list the {idcol} of the {n} {region} orders in {src} with the largest {total}, largest first.",
])
def _csv_top(c: Ctx) -> Case:
    src, out = c.src("csv", ["orders", "sales", "q3-orders"]), c.pick(["top.txt", "best.txt", "ranking.txt"])
    idcol, total = c.pick(["id", "order_id", "ref"]), c.pick(["total", "amount", "value"])
    regions = c.pick(["North", "South", "East", "West", "Central"], 3)
    region, n = regions[0], c.rng.randint(2, 4)
    values = c.pick(list(range(15, 2000, 7)), c.rng.randint(n + 5, n + 9))
    rows = [(f"A{1000 + i * 7 + c.rng.randint(0, 6)}", c.pick(PEOPLE), region if i < n + 1 else c.pick(regions), v)
            for i, v in enumerate(values)]
    c.rng.shuffle(rows)
    order = c.pick([[0, 1, 2, 3], [0, 2, 1, 3], [1, 0, 3, 2], [3, 2, 1, 0]])
    header = [idcol, "customer", "region", total]
    lines = [",".join(header[i] for i in order)] + [",".join(str(r[i]) for i in order) for r in rows]
    ic, rc, tc = (order.index(k) + 1 for k in (0, 2, 3))
    want = [r[0] for r in sorted((r for r in rows if r[2] == region), key=lambda r: -r[3])[:n]]
    return Case({src: text_of(lines)}, lines_is(out, want),
                f"awk -F, 'NR>1 && ${rc}==\"{region}\"' {q(src)} | sort -t, -k{tc},{tc}nr | head -n {n} "
                f"| cut -d, -f{ic} > {out}",
                dict(src=src, out=out, idcol=idcol, total=total, region=region, n=str(n)))


@op("chores", "chore-merge-count", (1, 2, 3), "GNU coreutils: sort -u, then wc -l", "sort -u", [
    "Merge {a} and {b} into {merged} (sorted, no duplicates), then write how many addresses {merged} has to {cnt}.",
    "We're combining two mailing lists, {a} and {b}; some people are on both. Could you make one sorted list "
    "without duplicates in {merged}, and put the number of people on it in {cnt}? Thanks!",
    "combine {a} + {b} into {merged} sorted with no dupes and the count of lines of it in {cnt}",
    "{merged} should be the sorted union of {a} and {b}, each address once, and {cnt} its number of lines.",
])
def _merge_count(c: Ctx) -> Case:
    a, b = c.pick([("newsletter.txt", "signups.txt"), ("list-a.txt", "list-b.txt"), ("old.txt", "new.txt")])
    merged, cnt = c.pick(["all.txt", "merged.txt", "everyone.txt"]), c.pick(["count.txt", "total.txt"])
    domain = c.pick(["example.com", "mail.test", "corp.local"])
    # distinct initials: sorts alike in any locale
    people = [f"{p.lower()}@{domain}" for p in c.pick(PEOPLE, c.rng.randint(6, 10))]
    cut = len(people) // 2
    xs, ys = people[:cut + 1] + people[:1], people[cut - 1:]
    c.rng.shuffle(xs)
    c.rng.shuffle(ys)
    files = {a: text_of(xs), b: text_of(ys)}
    verify = lines_is(merged, sorted(people)) + "\n" + answer_is(cnt, str(len(people)))
    return Case(files, verify, f"sort -u {a} {b} > {merged} && wc -l < {merged} > {cnt}",
                dict(a=a, b=b, merged=merged, cnt=cnt))


@op("chores", "chore-bundle-count", (3, 4), "GNU findutils find, then tar -czf -T and wc -l", "tar", [
    "Pack every .{ext} file under {d}/ (any depth, paths kept) into {arch}, and write how many files went in to {cnt}.",
    "Before the migration I'd like a backup of just the .{ext} files from {d}/ and its subfolders, as {arch}, "
    "with their paths as they are. Also note in {cnt} how many files the archive holds.",
    "bundle all .{ext} files in {d} (recursivly) into {arch} and put the file count in {cnt}",
    "{arch} should hold exactly the .{ext} files of the {d}/ tree, under their paths, and {cnt} their number.",
])
def _bundle(c: Ctx) -> Case:
    d, ext = c.pick(["etc", "config", "deploy"]), c.pick(["conf", "yaml", "ini"])
    arch, cnt = c.pick(["configs.tar.gz", "backup.tar.gz", f"{ext}-files.tar.gz"]), c.pick(["count.txt", "n.txt"])
    subs = ["", "nginx/", "app/", "app/extra/", "cron.d/"]
    hits = {f"{d}/{c.pick(subs)}{n}.{ext}": f"# {sentence(c.rng)}\nkey = {c.pick(WORDS)}\n"
            for n in c.pick(LETTERS, c.rng.randint(3, 6))}
    rest = {f"{d}/{c.pick(subs)}{n}.{e}": f"{sentence(c.rng)}\n"
            for n, e in zip(c.pick(WORDS, 2), ["bak", "txt"], strict=True)}
    verify = (f"import tarfile\n_got = {{}}\ntry:\n    with tarfile.open({arch!r}, 'r:gz') as _t:\n"
              "        _got = {m.name[2:] if m.name.startswith('./') else m.name: _t.extractfile(m).read().decode()"
              " for m in _t.getmembers() if m.isfile()}\n"
              "except Exception as e:\n    print('cannot read the archive:', e)\n"
              f"check(_got == {hits!r}, {arch!r} + ' should hold ' + repr({sorted(hits)!r})"
              " + ', holds ' + repr(sorted(_got)))\n"
              + answer_is(cnt, str(len(hits))))
    return Case(hits | rest, verify,
                f"find {d} -name '*.{ext}' > /tmp/list\ntar -czf {arch} -T /tmp/list\nwc -l < /tmp/list > {cnt}",
                dict(d=d, ext=ext, arch=arch, cnt=cnt))


@op("chores", "chore-rename-list", (3, 4), "bash: for loop with ${f%.ext}, then ls", "mv", [
    "Give every .{old} file in {d}/ the extension .{new} instead, then write the names of all .{new} files in "
    "{d}/ (sorted, one per line) to {lst}.",
    "The camera app saved some pictures in {d}/ as .{old}, and the gallery only picks up .{new}. Could you "
    "rename those so they end in .{new} (same names otherwise), and then put a sorted list of every .{new} "
    "file in that folder into {lst}? The other files are fine as they are.",
    "rename the .{old} files in {d}/ to .{new} and afterwards list all the .{new} names there (sorted) into {lst}",
    "No .{old} file should be left in {d}/: each becomes .{new} under the same name, and {lst} lists every .{new} "
    "file of {d}/ alphabetically.",
])
def _rename_list(c: Ctx) -> Case:
    d, lst = c.pick(["photos", "camera", "pictures"]), c.pick(["names.txt", "gallery.txt", "list.txt"])
    old, new = c.pick([("jpeg", "jpg"), ("JPG", "jpg"), ("JPEG", "jpg")])
    stems = c.pick(LETTERS, c.rng.randint(5, 7))
    renamed, kept = stems[:-2], stems[-2:-1]  # the last stem is an unrelated .txt file
    files = {f"{d}/{s}.{old}": f"{sentence(c.rng)}\n" for s in renamed}
    files |= {f"{d}/{s}.{new}": f"{sentence(c.rng)}\n" for s in kept} | {f"{d}/{stems[-1]}.txt": "caption list\n"}
    verify = "\n".join([f"text_is({d + '/' + s + '.' + new!r}, {files[f'{d}/{s}.{old}']!r})\n" + gone(f"{d}/{s}.{old}")
                        for s in renamed] + [f"text_is({p!r}, {t!r})" for p, t in files.items() if not p.endswith(old)]
                       + [lines_is(lst, sorted(f"{s}.{new}" for s in renamed + kept))])
    return Case(files, verify, f"for f in {d}/*.{old}; do mv \"$f\" \"${{f%.{old}}}.{new}\"; done\n"
                f"ls {d} | grep '\\.{new}$' > {lst}", dict(d=d, old=old, new=new, lst=lst))
