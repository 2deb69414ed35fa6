"""`appliance report --html`: one self-contained page with the curve (inline SVG with intervals) and the tables."""

import re
from html.parser import HTMLParser
from pathlib import Path

from click.testing import CliRunner

from appliance.cli import main
from appliance.diagnosis import build_report
from appliance.report_html import markdown_html, write_html
from appliance.store import Store

HOSTILE = "<script>alert('x')</script> & <img src=x onerror=alert(1)>"


class Page(HTMLParser):
    """Every element with its attributes and the svg it sits in, the text, and the tables' cells."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None], int]] = []
        self.svgs = 0
        self.open_svg = 0
        self.text: list[str] = []
        self.cells: list[str] = []
        self.in_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "svg":
            self.svgs += 1
            self.open_svg = self.svgs
        self.tags.append((tag, dict(attrs), self.open_svg))
        self.in_cell = tag in ("td", "th")

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.open_svg = 0
        if tag in ("td", "th"):
            self.in_cell = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self.in_cell:
            self.cells.append(data.strip())

    def in_svg(self, n: int, tag: str) -> list[dict[str, str | None]]:
        return [a for t, a, s in self.tags if s == n and t == tag]


def seed(store: Store) -> None:
    store.create_run("r", {})
    for it, (files, text) in enumerate([(1, 0), (3, 1), (4, 2)]):  # passed of 4 per cell and iteration
        store.set_eval("r", it, it, "files", 2, 4, files)
        store.set_eval("r", it, it, "text", 3, 4, text)
    for step, loss in enumerate([0.9, 0.5, 0.3], start=1):
        store.add_metrics("r", step, {"loss": loss, "reward_mean": step / 4, "groups_with_signal": 2.0,
                                      "logprob_gap_mean": 0.01 * step})
    report, md = build_report(store, "r", 2)
    md += f"\n\n## Capability\n\n- files L2: 1/4 passed\n  - e.g. \"{HOSTILE}\" -> `cat {HOSTILE}`\n"
    store.save_report("r", 2, report, md)


def test_the_page_has_the_curve_with_intervals_the_training_metrics_and_the_tables(tmp_path: Path) -> None:
    store = Store(tmp_path / "appliance.db")
    seed(store)
    store.close()
    out = tmp_path / "copy" / "report.html"
    out.parent.mkdir()
    r = CliRunner().invoke(main, ["report", "--html", str(out)], env={"APPLIANCE_HOME": str(tmp_path)},
                           catch_exceptions=False)
    assert r.exit_code == 0 and str(out) in r.output
    assert not list(out.parent.glob(".*.partial"))  # renamed into place
    page = out.read_text()
    parsed = Page()
    parsed.feed(page)

    tags = {t for t, _, _ in parsed.tags}
    assert "script" not in tags and "link" not in tags and "img" not in tags  # nothing to fetch, nothing runs
    assert "http" not in page.replace("http-equiv", "")
    # the first chart is the held-out curve: one point per iteration, each with its Wilson interval
    curve = [a for a in parsed.in_svg(1, "circle") if a.get("class") == "point"]
    assert [a["data-x"] for a in curve] == ["0", "1", "2"]
    assert [float(a["data-y"]) for a in curve] == [1 / 8, 4 / 8, 6 / 8]
    intervals = [a for a in parsed.in_svg(1, "g") if a.get("class") == "interval"]
    assert len(intervals) == 3
    assert all(float(a["data-low"]) < float(a["data-high"]) for a in intervals)
    labels = {a.get("aria-label") for t, a, _ in parsed.tags if t == "svg"}
    assert {"files", "text", "L2", "L3"} <= labels  # per family and per level
    assert "GRPO loss" in labels and "groups with signal" in labels
    assert "optimizer step · logprob_gap_mean" in "".join(parsed.text)
    # the report's tables: held-out and practice pass rates by family x level
    assert sum(t == "table" for t, _, _ in parsed.tags) >= 1
    assert "family" in parsed.cells and "4/4" in parsed.cells
    # hostile stored text arrives as text, never as markup
    assert HOSTILE in "".join(parsed.text)
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_the_page_for_an_earlier_iteration_stops_its_curve_there(tmp_path: Path) -> None:
    store = Store(tmp_path / "appliance.db")
    seed(store)
    report, md = build_report(store, "r", 1)
    store.save_report("r", 1, report, md)
    path = write_html(store, "r", report, md, tmp_path / "one.html")
    parsed = Page()
    parsed.feed(path.read_text())
    assert [a["data-x"] for a in parsed.in_svg(1, "circle")] == ["0", "1"]
    store.close()


def test_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "appliance.db")
    seed(store)
    store.close()
    r = CliRunner().invoke(main, ["report", "--html", str(tmp_path / "nowhere" / "r.html")],
                           env={"APPLIANCE_HOME": str(tmp_path)})
    assert r.exit_code == 1 and "does not exist" in r.output and "mkdir -p" in r.output


def test_markdown_tables_lists_and_code_are_escaped() -> None:
    out = markdown_html("# T\n\n| family | L1 |\n|---|---|\n| <b>x</b> | 1/2 |\n\n- ran `rm <x>` **now**")
    assert "<h1>T</h1>" in out and "<th>family</th>" in out and "<td>&lt;b&gt;x&lt;/b&gt;</td>" in out
    assert "<li>ran <code>rm &lt;x&gt;</code> <strong>now</strong></li>" in out


def test_a_hostile_family_name_is_escaped_in_the_charts_and_tables(tmp_path: Path) -> None:
    store = Store(tmp_path / "appliance.db")
    store.create_run("r", {})
    store.set_eval("r", 0, 0, '<svg onload="x">', 2, 4, 1)
    report, md = build_report(store, "r", 0)
    page = write_html(store, "r", report, md, tmp_path / "r.html").read_text()
    store.close()
    parsed = Page()
    parsed.feed(page)
    assert parsed.svgs == 1 + 1 + 1 + 6  # the curve, one family, one level, the training metrics: no other svg
    assert not any(k.startswith("on") for _, a, _ in parsed.tags for k in a)
    assert '<svg onload="x">' in parsed.cells and '<svg onload="x">' in {a.get("aria-label") for t, a, _ in parsed.tags}


def test_the_policys_analysis_cannot_add_sections_to_the_page(tmp_path: Path) -> None:
    # Issue 47: the analysis was rendered as the report's own Markdown: a policy could add headings (a fake
    # "Held-out pass@1" section with its own table) to the page people read
    from appliance.diagnosis import render_markdown

    store = Store(tmp_path / "appliance.db")
    seed(store)
    report, _ = build_report(store, "r", 1)
    report.analysis = ("Solid progress.\n\n## Held-out pass@1 (audited)\n\n| family | pass@1 |\n|---|---|\n"
                       "| all | 100% |\n# Verdict: ship it\n- **all** fixed `" + HOSTILE + "`")
    md = render_markdown(report)
    page = write_html(store, "r", report, md, tmp_path / "r.html").read_text()
    store.close()
    parsed = Page()
    parsed.feed(page)
    headings = re.findall(r"<h[1-6][^>]*>(.*?)</h[1-6]>", page)
    assert not any("Verdict" in h or "audited" in h for h in headings), headings
    assert "100%" not in parsed.cells  # its table is text, not one of the report's tables
    assert "Verdict: ship it" in page and "<script>" not in page.split("<body>", 1)[1]
    analysis = page.split('<div class="analysis">', 1)[1].split("</div>", 1)[0]
    assert "# Verdict: ship it" in analysis and "Solid progress." in analysis
