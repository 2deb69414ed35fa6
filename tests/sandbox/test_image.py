"""The offline image recipe: tag by content hash, rootfs cache keyed by packages only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.sandbox import build_image, image_exists, image_ref
from appliance.sandbox import image as image_mod


@pytest.fixture
def recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "recipe"
    shutil.copytree(image_mod.RECIPE_DIR, copy)
    monkeypatch.setattr(image_mod, "RECIPE_DIR", copy)
    return copy


def test_recipe_lists_the_promised_tools() -> None:
    pkgs = image_mod.packages()
    for p in ("python3", "git", "gawk", "jq", "file", "patch", "procps"):
        assert p in pkgs
    containerfile = (image_mod.RECIPE_DIR / "Containerfile").read_text()
    assert "FROM scratch" in containerfile and "--uid 1000" in containerfile and "/workspace" in containerfile


def test_tag_changes_with_the_recipe_but_rootfs_key_only_with_packages(settings: Settings, recipe: Path) -> None:
    sources = recipe / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n")
    ref, key = image_ref(settings), image_mod.rootfs_key(sources)
    assert ref.startswith(f"{settings.sandbox.image}:") and image_ref(settings) == ref
    (recipe / "Containerfile").write_text((recipe / "Containerfile").read_text() + "LABEL x=1\n")
    assert image_ref(settings) != ref
    assert image_mod.rootfs_key(sources) == key
    (recipe / "packages").write_text((recipe / "packages").read_text() + "sqlite3\n")
    assert image_mod.rootfs_key(sources) != key


@pytest.mark.slow
def test_build_is_a_no_op_when_the_image_exists(sandbox_settings: Settings) -> None:
    assert image_exists(sandbox_settings)
    logs: list[str] = []
    assert build_image(sandbox_settings, log=logs.append) == image_ref(sandbox_settings)
    assert logs == []



def test_apt_sources_found_as_debian_images_and_mmdebstrap_name_them(tmp_path: Path) -> None:
    from appliance.errors import SetupError
    from appliance.sandbox.image import apt_sources

    d = tmp_path / "apt" / "sources.list.d"
    d.mkdir(parents=True)
    with pytest.raises(SetupError) as e:
        apt_sources(tmp_path / "apt")
    assert "sources.list.d" in e.value.message and e.value.hint
    (tmp_path / "apt" / "sources.list").write_text("\n")  # empty: skipped
    (d / "0000debian.sources").write_text("Types: deb\nURIs: http://mirror/debian\n")
    assert apt_sources(tmp_path / "apt").name == "0000debian.sources"  # an mmdebstrap rootfs
    (d / "debian.sources").write_text("Types: deb\nURIs: http://mirror/debian\n")
    assert apt_sources(tmp_path / "apt").name == "debian.sources"  # Debian's images


def test_an_ubuntu_hosts_sources_give_way_to_debians_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: an Ubuntu host's sources (its archive, which has no bookworm) were handed to mmdebstrap, and
    `appliance init` failed there; the container's base had the same fault (scripts/container)."""
    from appliance.errors import SetupError

    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list.d" / "ubuntu.sources").write_text(
        "Types: deb\nURIs: http://archive.ubuntu.com/ubuntu/\nSuites: noble noble-updates\nComponents: main\n")
    (apt / "sources.list").write_text("deb http://archive.ubuntu.com/ubuntu/ jammy main\n")
    keyring = tmp_path / "debian-archive-keyring.gpg"
    keyring.write_bytes(b"key")
    monkeypatch.setattr(image_mod, "DEBIAN_KEYRING", keyring)
    monkeypatch.setenv("APPLIANCE_DEBIAN_MIRROR", "http://mirror.local/debian")
    monkeypatch.delenv("APPLIANCE_DEBIAN_SECURITY_MIRROR", raising=False)
    made = image_mod.apt_sources(apt, generated=tmp_path / "cache" / "debian.sources")
    text = made.read_text()
    assert made == tmp_path / "cache" / "debian.sources" and "archive.ubuntu.com" not in text
    assert "URIs: http://mirror.local/debian\nSuites: bookworm bookworm-updates" in text
    assert "bookworm-security" in text and f"Signed-By: {keyring}" in text
    keyring.unlink()
    with pytest.raises(SetupError, match="no Debian archive keyring") as e:
        image_mod.apt_sources(apt, generated=tmp_path / "cache" / "debian.sources")
    assert "debian-archive-keyring" in e.value.hint
