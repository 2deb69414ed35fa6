"""Workspace archives (no Podman): what comes from the untrusted side is re-packed, and what is dropped is named."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

from appliance.sandbox import transfer
from appliance.tasks import TaskSpec
from appliance.tasks.validate import prepare


def hostile_archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, type_: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size, info.mode = type_, link, len(data), 0o644
            tar.addfile(info, io.BytesIO(data) if data else None)

        add("./ok.txt", data=b"fine")
        add("./abs", tarfile.SYMTYPE, link="/etc/shadow")
        add("./up", tarfile.SYMTYPE, link="../../etc")
        add("./inside", tarfile.SYMTYPE, link="ok.txt")
        add("./pipe", tarfile.FIFOTYPE)
        add("./dev", tarfile.CHRTYPE)
        add("/etc/cron.d/x", data=b"* * * * * root evil")
        add("../escape.txt", data=b"x")
        info = tarfile.TarInfo("/root/.bashrc")  # written as a pax 'path' record, which wins when copied
        info.pax_headers = {"path": "/root/.bashrc"}
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    return buf.getvalue()


def test_sanitize_keeps_the_tree_and_names_what_it_drops(tmp_path: Path) -> None:
    data, dropped = transfer.sanitize(hostile_archive())
    # an absolute name is made relative (it lands inside the tree, never at /)
    assert set(transfer.members(data)) == {"ok.txt", "inside", "etc/cron.d/x", "root/.bashrc"}
    assert all(not m.name.startswith("/") for m in tarfile.open(fileobj=io.BytesIO(data)))
    assert {d.split(" ")[0] for d in dropped} == {"abs", "up", "pipe", "dev", "../escape.txt"}
    transfer.unpack(data, tmp_path / "out")
    # the host gets files and directories only: no link it could later be redirected through
    assert (tmp_path / "out" / "ok.txt").read_text() == "fine" and not os.path.lexists(tmp_path / "out" / "inside")
    assert not (tmp_path / "escape.txt").exists()


def test_a_link_chain_cannot_carry_a_host_write_out_of_the_tree(tmp_path: Path) -> None:
    # Each link looks inside on its own ("s" -> ".", "p" -> "s/s/s/../..", lexically "."), but followed on
    # disk "p" climbs out; a file written "through" it must stay in the tree.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, link in (("s", "."), ("p", "s/s/s/../../..")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info)
        info = tarfile.TarInfo("p/planted.txt")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    data, _ = transfer.sanitize(buf.getvalue())
    (tmp_path / "deep" / "out").mkdir(parents=True)
    transfer.unpack(data, tmp_path / "deep" / "out")
    assert sorted(p.name for p in tmp_path.rglob("planted.txt")) == ["planted.txt"]
    assert (tmp_path / "deep" / "out" / "p" / "planted.txt").read_bytes() == b"evil"


def test_member_data_ending_in_zeros_survives_every_repack() -> None:
    # A zero-filled file (`truncate -s 4K`, `dd if=/dev/zero`) once lost its tail to the padding trim.
    blob = b"x" + b"\0" * 5000
    data = transfer.pack_files({"a/zeros.bin": blob})
    data, dropped = transfer.sanitize(data)
    data, _ = transfer.overlay(data, {"keep.txt": "k\n"})
    data = transfer.without(data, ["keep.txt"])
    assert dropped == [] and transfer.read_member(data, "a/zeros.bin") == blob
    assert len(data) % 512 == 0 and len(data) < 10240


def test_packed_files_are_new_not_from_1970() -> None:
    # `find -mtime +2 -delete` in a task's reference must spare every file setup did not age.
    member = transfer.members(transfer.pack_files({"d/a.txt": "x"}))
    assert all(abs(m.mtime - time.time()) < 60 for m in member.values())


def test_pack_dir_never_follows_links_and_leaves_special_files_out(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("host")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a")
    os.symlink(tmp_path / "secret", ws / "link")
    os.mkfifo(ws / "pipe")
    data, dropped = transfer.pack_dir(ws)
    assert set(transfer.members(data)) == {"a.txt"}
    assert "pipe (special file)" in dropped and any(d.startswith("link (link") for d in dropped)
    assert b"host" not in data


def test_prepare_restores_protected_files_over_whatever_stands_in_their_way() -> None:
    spec = TaskSpec(id="t", family="f", difficulty=1, instruction="i", verify="v", solution="s",
                    files={"tests/check.py": "ok\n", "calc.py": "x\n", "json.py": "shipped\n"},
                    protected=["tests/check.py"])
    agent = transfer.pack_files({"calc.py": "y\n", "unittest/__init__.py": "evil", "json.py": "shipped\n",
                                 "tests/check.py/inner": "z", "re.py": "evil", "csv/data.csv": "1,2"})
    data, tampered = prepare(spec, agent)
    names = set(transfer.members(data))
    assert transfer.read_member(data, "tests/check.py") == b"ok\n"
    assert "unittest/__init__.py" not in names and "re.py" not in names
    assert "json.py" in names and "csv/data.csv" in names  # a task's own file and a plain data dir stay
    assert sorted(tampered) == ["re.py (module shadowing the standard library)", "tests/check.py",
                                "unittest (module shadowing the standard library)"]


def test_a_last_file_ending_in_zero_bytes_survives_the_compaction() -> None:
    # an uncompressed .tar in the workspace ends in kilobytes of zero blocks: they are its data, not padding
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as tar:
        info = tarfile.TarInfo("x.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    files = {"a.txt": b"text\n", "z/backup.tar": inner.getvalue(), "zz/zeros.bin": b"\0" * 3000}
    data = transfer.pack_files(files)
    for name, content in files.items():
        assert transfer.read_member(data, name) == content
    restored, _ = transfer.overlay(data, {"a.txt": "text\n"})
    assert transfer.read_member(restored, "zz/zeros.bin") == b"\0" * 3000
    assert len(transfer.pack_files({"a.txt": "x"})) == 512 + 512 + 1024  # still no 10 KiB record padding


def test_reroot_names_a_copied_tree_as_pack_dir_would_and_keeps_its_links() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, type_, link in [("workspace", tarfile.DIRTYPE, ""), ("workspace/a.txt", tarfile.REGTYPE, ""),
                                  ("workspace/soft", tarfile.SYMTYPE, "a.txt"),
                                  ("workspace/hard", tarfile.LNKTYPE, "workspace/a.txt"),
                                  ("other.txt", tarfile.REGTYPE, "")]:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = type_, link
            info.size = 2 if type_ == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(b"hi") if type_ == tarfile.REGTYPE else None)
    data, _ = transfer.sanitize(buf.getvalue())
    got = transfer.members(transfer.reroot(data, "workspace"))
    assert sorted(got) == ["a.txt", "hard", "soft"]
    assert got["soft"].issym() and got["soft"].linkname == "a.txt"
    assert got["hard"].islnk() and got["hard"].linkname == "a.txt"
    assert transfer.read_member(transfer.reroot(data, "workspace"), "a.txt") == b"hi"


def test_a_sparse_member_within_the_cap_is_refused_never_expanded(tmp_path: Path) -> None:
    # Issue 47: `truncate -s` costs a tmpfs nothing and `tar -S` carries it as a few blocks, but re-packed as
    # a plain file it was written out whole (10 KiB became 1 GiB); under the cap it still was.
    import subprocess

    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("a\n")
    with open(tmp_path / "ws" / "big.bin", "wb") as f:
        f.truncate(32 << 20)
    packed = subprocess.run(["tar", "-c", "-S", "-C", str(tmp_path / "ws"), "."], capture_output=True, check=True)
    assert len(packed.stdout) < 64 << 10
    data, dropped = transfer.sanitize(packed.stdout, cap=64 << 20)
    assert len(data) < 64 << 10, f"the sparse member was expanded to {len(data) >> 20} MiB"
    assert set(transfer.members(data)) == {"a.txt"}
    assert dropped == [f"big.bin (sparse file of {32 << 20} bytes: refused, never expanded)"]


def _links(*pairs: tuple[str, str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, link, type_ in pairs:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = type_, link
            tar.addfile(info)
    return buf.getvalue()


def test_a_link_resolved_through_earlier_links_cannot_leave_the_tree() -> None:
    # Issue 47: `sub/x -> d/../../etc/passwd` is lexically `etc/passwd` (inside), but with `sub/d -> .` the
    # kernel reads sub/x as /etc/passwd of the sandbox that unpacks it; the chain is refused in either order.
    sym, hard = tarfile.SYMTYPE, tarfile.LNKTYPE
    for chain in ([("sub/d", ".", sym), ("sub/x", "d/../../etc/passwd", sym)],
                  [("sub/x", "d/../../etc/passwd", sym), ("sub/d", ".", sym)]):
        data, dropped = transfer.sanitize(_links(("a.txt", "", tarfile.REGTYPE), ("sub", "", tarfile.DIRTYPE),
                                                 *chain, ("sub/ok", "d/../a.txt", sym),
                                                 ("h", "sub/d/../../etc/passwd", hard), ("h2", "sub/d/ok", hard)))
        assert set(transfer.members(data)) == {"a.txt", "sub", "sub/d", "sub/ok", "h2"}, dropped
        assert sorted(dropped) == ["h (hard link: points outside the tree through links)",
                                   "sub/x (link: points outside the tree through links)"]


def test_resolving_links_costs_the_host_a_bounded_time() -> None:
    # Each link followed through 40 others whose targets are 2,000 characters of `./`: the resolution above
    # walked every component of every link (20,000 such links held the host's CPU for many minutes); the walk
    # now has a budget per archive, and what it cannot afford is refused.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        def link(name: str, target: str) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)

        for k in range(39):
            link(f"c{k}", f"{'./' * 1000}c{k + 1}")
        link("c39", "d")
        for n in range(3000):
            link(f"l{n}", f"{'./' * 1000}c0")
    t0 = time.monotonic()
    data, dropped = transfer.sanitize(buf.getvalue())
    assert time.monotonic() - t0 < 10
    assert any(d.endswith("(link: too many links to resolve)") for d in dropped)
    assert not any("outside" in d for d in dropped)  # (nothing here leaves the tree)
