"""Print what the TUI's overview shows for a store, as plain text: the real Textual app, run headless under
Pilot over the store in --home (read-only use), so a run's screen can be pasted into a note or a bug report.

Usage: scripts/tui_snapshot.py --home DIR [--svg FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402
from rich.text import Text  # noqa: E402

from appliance.store import Store  # noqa: E402
from appliance.tui.app import ApplianceApp  # noqa: E402


async def overview(home: Path, svg: Path | None) -> str:
    store = Store(home / "appliance.db", migrate=False)
    app = ApplianceApp(lambda: store, probe=lambda: "CPU", decoder_factory=lambda: None, refresh_s=3600)
    console = Console(width=120, record=True, file=open("/dev/null", "w"), color_system=None)
    async with app.run_test(size=(120, 50)) as pilot:
        for _ in range(20):  # the first load runs in a worker
            await pilot.pause(0.25)
        for widget in app.screen.query("#overview Static"):
            content = widget.content
            console.print(Text.from_markup(content) if isinstance(content, str) else content)
        if svg is not None:
            svg.write_text(app.export_screenshot())
    store.close()
    return console.export_text()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", type=Path, required=True, help="APPLIANCE_HOME whose store to show")
    ap.add_argument("--svg", type=Path, default=None, help="also write Textual's SVG screenshot here")
    args = ap.parse_args()
    if not (args.home / "appliance.db").exists():
        print(f"no store at {args.home / 'appliance.db'}", file=sys.stderr)
        return 1
    print(asyncio.run(overview(args.home, args.svg)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
