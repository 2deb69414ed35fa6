"""Archives and compression: tar, gzip, zip (every level is table-driven; see _ops.py)."""

from __future__ import annotations

import random

from appliance.tasks.families._ops import (
    STEMS,
    Case,
    Ctx,
    generate_family,
    gone,
    line_set_is,
    lines_is,
    log_lines,
    number_is,
    op,
    q,
    sentence,
    text_of,
)
from appliance.tasks.format import TaskSpec

FAMILY = "archive"
DESCRIPTION = "archives and compression: tar, gzip, zip"


def generate(level: int, rng: random.Random, *, split: str = "train", hint: str | None = None) -> TaskSpec:
    return generate_family(FAMILY, level, rng, split=split, hint=hint)


def _tree(c: Ctx) -> tuple[str, dict[str, str]]:
    d = c.pick(["project", "photos", "reports", "website", "configs"])
    names = c.pick(STEMS, c.rng.randint(2, 4))
    files = {f"{d}/{n}.txt": f"{sentence(c.rng)}\n" for n in names}
    files[f"{d}/sub/{c.pick(STEMS)}.md"] = f"# {sentence(c.rng)}\n"
    return d, files


def _archive_members(path: str, mode: str, files: dict[str, str]) -> str:
    """Checks that the archive at path holds every file with its content (tar or zip, by mode)."""
    return (f"import tarfile, zipfile\nwant = {files!r}\ngot = {{}}\ntry:\n"
            + ("    with zipfile.ZipFile(" + repr(path) + ") as z:\n"
               "        got = {n.rstrip('/'): z.read(n).decode() for n in z.namelist() if not n.endswith('/')}\n"
               if mode == "zip" else
               "    with tarfile.open(" + repr(path) + f", 'r:{mode}') as t:\n"
               "        got = {m.name.lstrip('./'): t.extractfile(m).read().decode()"
               " for m in t.getmembers() if m.isfile()}\n")
            + "except Exception as e:\n    print('cannot read the archive:', e)\n"
            # An archive written inside the tree it packs may or may not catch a partial copy of itself
            # (tar through a compressor cannot tell the file is its own output): never part of the answer.
            f"got.pop({path!r}, None)\n"
            f"check(got == want, {path!r} + ' should hold ' + repr(sorted(want)) + ', holds ' + repr(sorted(got)))")


@op("archive", "tar-create-gz", (1, 2, 3), "GNU tar: -czf", "tar -czf", [
    "Pack the directory {d}/ into a gzip-compressed tar archive named {out}.",
    "Create {out}, a .tar.gz of the whole {d} folder (paths inside should start with {d}/).",
    "Back up {d}/ as the compressed tarball {out}.",
    "{out} should be a gzipped tar of {d}/ and everything in it.",
], traps=("missing-dir",))
def _tar_c(c: Ctx) -> Case:
    d, files = _tree(c)
    out = c.out(f"{d}-{c.rng.randint(1, 30):02d}.tar.gz")
    return Case(files, _archive_members(out, "gz", files), f"tar -czf {q(out)} {d}", dict(d=d, out=out))


@op("archive", "tar-create-bz2", (2, 3, 4), "GNU tar: -cjf (bzip2)", "tar -cjf", [
    "Archive {d}/ as a bzip2-compressed tarball called {out}.",
    "Make {out}: the {d} directory in a tar archive compressed with bzip2.",
    "{out} should be a .tar.bz2 of {d}/ with paths starting {d}/.",
    "Compress the folder {d} into {out} (tar + bzip2).",
], traps=("missing-dir",))
def _tar_j(c: Ctx) -> Case:
    d, files = _tree(c)
    out = c.out(f"{d}.tar.bz2")
    return Case(files, _archive_members(out, "bz2", files), f"tar -cjf {q(out)} {d}", dict(d=d, out=out))


def _packed(c: Ctx, kind: str) -> tuple[str, dict[str, str], str, str]:
    """Files that setup packs into an archive (and removes): (dir, files, archive name, setup)."""
    d, files = _tree(c)
    name = c.pick(["backup", "release", "snapshot", "bundle"]) + {"tgz": ".tar.gz", "zip": ".zip"}[kind]
    pack = f"tar -czf {name} {d}" if kind == "tgz" else f"python3 -m zipfile -c {name} {d}"
    return d, files, name, f"{pack}\nrm -r {d}\n"


@op("archive", "tar-extract", (1, 2, 3), "GNU tar: -xzf", "tar -xzf", [
    "Extract the archive {src} here.",
    "Unpack {src} into the current directory.",
    "The files we need are inside {src}; unpack them so {d}/ exists here.",
    "Restore {d}/ from the tarball {src}.",
])
def _tar_x(c: Ctx) -> Case:
    d, files, name, setup = _packed(c, "tgz")
    verify = "\n".join(lines_is(p, [t.strip()]) for p, t in files.items())
    return Case({}, verify, f"tar -xzf {name}", dict(src=name, d=d), setup=_setup(files) + setup)


@op("archive", "tar-extract-into", (2, 3, 4), "GNU tar: -xzf -C", "tar -C", [
    "Extract {src} into the directory {dest}/ (so {dest}/{d}/... exists).",
    "Unpack {src} under {dest}/, not into the current directory.",
    "Put the contents of {src} below {dest}/.",
    "Restore {src} inside a directory named {dest}.",
])
def _tar_xc(c: Ctx) -> Case:
    d, files, name, setup = _packed(c, "tgz")
    dest = c.pick(["restore", "unpacked", "tmp_extract", "review"])  # missing: tar -C fails until it is made
    verify = "\n".join(lines_is(f"{dest}/{p}", [t.strip()]) for p, t in files.items())
    return Case({}, verify, f"mkdir -p {dest} && tar -xzf {name} -C {dest}", dict(src=name, d=d, dest=dest),
                setup=_setup(files) + setup)


@op("archive", "tar-list", (2, 3, 4), "GNU tar: -tzf", "tar -t", [
    "Write the list of files stored in {src} into {out}, one path per line (as `tar -t` prints it; any order).",
    "Without extracting it, list what is inside {src}; save the listing to {out}.",
    "{out} should contain the table of contents of the archive {src}.",
    "What does {src} contain? Write its member paths to {out}.",
], heldout=True)
def _tar_t(c: Ctx) -> Case:
    d, files, name, setup = _packed(c, "tgz")
    members = sorted(files) + [f"{d}/", f"{d}/sub/"]
    return Case({}, line_set_is("contents.txt", members), f"tar -tzf {name} > contents.txt",
                dict(src=name, out="contents.txt"), setup=_setup(files) + setup)


@op("archive", "gzip-file", (1, 2, 3), "GNU gzip", "gzip", [
    "Compress {src} with gzip (so {src}.gz replaces it).",
    "gzip the file {src}.",
    "{src} is too big: compress it to {src}.gz; the uncompressed file should be gone.",
    "Replace {src} with its gzip-compressed version.",
], traps=("spaces",))
def _gzip(c: Ctx) -> Case:
    src = c.src("log", ["app", "server", "access", "debug"])
    text = "".join(f"{sentence(c.rng)}\n" for _ in range(6))
    verify = (f"import gzip\ntry:\n    got = gzip.open({src + '.gz'!r}).read().decode()\nexcept Exception as e:\n"
              f"    got = str(e)\ncheck(got == {text!r}, '{src}.gz should decompress to the original')\n" + gone(src))
    return Case({src: text}, verify, f"gzip {q(src)}", dict(src=src))


@op("archive", "gunzip-file", (1, 2, 3), "GNU gzip: gunzip", "gunzip", [
    "Decompress {src} so the plain file {plain} is here.",
    "Unzip the gzip file {src}.",
    "We need {plain} uncompressed; it is in {src}.",
    "Restore {plain} from its .gz.",
])
def _gunzip(c: Ctx) -> Case:
    plain = c.pick(STEMS) + ".csv"
    lines = [f"{sentence(c.rng)}" for _ in range(4)]
    return Case({plain: text_of(lines)}, lines_is(plain, lines), f"gunzip {plain}.gz",
                dict(src=plain + ".gz", plain=plain), setup=f"gzip -n {plain}\n")


@op("archive", "zgrep-count", (2, 3, 4), "GNU gzip: zgrep", "zgrep", [
    "{src} is a compressed log. Write the number of lines containing ERROR into {out}.",
    "Count the ERROR lines inside the gzipped file {src}; save the number as {out}.",
    "{out} should hold how many lines of {src} (uncompressed) mention ERROR.",
    "Without unpacking it for good, count ERROR lines in {src} into {out}.",
], traps=("missing-dir",))
def _zgrep(c: Ctx) -> Case:
    lines = log_lines(c.rng, c.rng.randint(8, 14))
    lines[0] = lines[0].rsplit(" ", 3)[0] + " ERROR disk full"
    plain, out = c.pick(["app.log", "server.log", "syslog"]), c.out("errors.txt")
    return Case({plain: text_of(lines)}, number_is(out, sum("ERROR" in x for x in lines)),
                f"zgrep -c ERROR {plain}.gz > {q(out)}", dict(src=plain + ".gz", out=out), setup=f"gzip -n {plain}\n")


@op("archive", "zip-create", (1, 2, 3), "Info-ZIP: zip -r", "zip -r", [
    "Create a zip archive {out} containing the directory {d}/ and everything in it.",
    "Zip up {d} (recursively) into {out}.",
    "{out} should be a .zip of the {d}/ folder.",
    "Make {out} from {d}/ so it can be emailed.",
])
def _zip(c: Ctx) -> Case:
    d, files = _tree(c)
    out = f"{d}.zip"
    return Case(files, _archive_members(out, "zip", files), f"zip -qr {out} {d}", dict(d=d, out=out))


@op("archive", "unzip-extract", (1, 2, 3), "Info-ZIP: unzip", "unzip", [
    "Extract {src} into the current directory.",
    "Unpack the zip file {src} here.",
    "{src} holds {d}/; unzip it.",
    "Get the files out of {src}.",
])
def _unzip(c: Ctx) -> Case:
    d, files, name, setup = _packed(c, "zip")
    verify = "\n".join(lines_is(p, [t.strip()]) for p, t in files.items())
    return Case({}, verify, f"unzip -q {name}", dict(src=name, d=d), setup=_setup(files) + setup)


def _setup(files: dict[str, str]) -> str:
    """Setup lines that write files (for archives whose contents must not be in the workspace as files)."""
    out = ""
    for p, t in files.items():
        out += f"mkdir -p {q(p.rsplit('/', 1)[0])}\nprintf %s {q(t)} > {q(p)}\n"
    return out
