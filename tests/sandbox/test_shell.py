"""The pieces of the shell protocol that need no container: bounded capture and bash quoting."""

from __future__ import annotations

import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.sandbox.shell import Capture, ansi_c_quote

TOKEN = b"\x1e__appliance_0123456789abcdef__"


@given(st.binary(max_size=3000), st.lists(st.integers(min_value=1, max_value=200), max_size=50),
       st.integers(min_value=1, max_value=2000))
def test_capture_finds_the_token_across_any_chunking(body: bytes, cuts: list[int], limit: int) -> None:
    body = body.replace(b"\x1e", b"")
    stream = body + TOKEN + b"17\n"
    cap = Capture(limit, TOKEN)
    pos, done = 0, False
    for n in cuts + [len(stream)]:
        if pos >= len(stream):
            break
        done = cap.feed(stream[pos:pos + n])
        pos += n
    assert done and cap.trailer == b"17"
    assert bytes(cap.kept) == body[:limit] and cap.dropped == max(0, len(body) - limit)
    assert ("more bytes dropped" in cap.text()) == (len(body) > limit)


def test_capture_without_token_keeps_the_head_and_counts_the_rest() -> None:
    cap = Capture(10)
    for _ in range(1000):
        cap.feed(b"x" * 1000)
    assert bytes(cap.kept) == b"x" * 10 and cap.dropped == 999_990


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=80))
def test_ansi_c_quote_round_trips_through_bash(text: str) -> None:
    out = subprocess.run(["bash", "-c", f"printf %s {ansi_c_quote(text)}"], capture_output=True)
    assert out.stdout.decode() == text
