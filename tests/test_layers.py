"""The house's order (docs/DESIGN.md "Components"): every import of the package points down a floor, and
the page's table is the one scripts/module_table.py prints from the code."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import module_table  # noqa: E402  (scripts/module_table.py: ROOMS, the one place with the floors)


def test_every_import_points_down_a_floor() -> None:
    problems = module_table.violations(module_table.read_imports(module_table.package_modules()))
    assert not problems, "\n".join(problems)


def test_an_arrow_up_a_circle_and_a_module_without_a_room_are_found(tmp_path: Path) -> None:
    package = tmp_path / "appliance"
    (package / "tui").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "store.py").write_text("def rows():\n    from appliance.loop import Loop  # lazily, still an arrow\n")
    (package / "loop.py").write_text("from appliance import store\n")
    (package / "tui" / "__init__.py").write_text("from .screens import Screen\n")
    (package / "tui" / "screens.py").write_text("from appliance.tui import Screen\n")  # a circle in one room: fine
    (package / "scheduler.py").write_text("from appliance.tui import screens\n")  # same floor: not allowed
    (package / "unplaced.py").write_text("")
    problems = module_table.violations(module_table.read_imports(module_table.package_modules(package)))
    assert any(p.startswith("appliance.store:2 imports appliance.loop") for p in problems), problems
    assert any(p.startswith("appliance.scheduler:1 imports appliance.tui.screens") for p in problems), problems
    assert any(p.startswith("appliance.unplaced has no room") for p in problems), problems
    assert len(problems) == 3, problems


def test_the_design_page_shows_the_table_the_code_makes() -> None:
    printed = subprocess.run([sys.executable, str(REPO / "scripts" / "module_table.py")], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.strip()
    assert printed.startswith("| floor | module | owns |")
    assert module_table.design_table() == printed, \
        "docs/DESIGN.md's Components table is stale: run scripts/module_table.py --write"


MAX_MODULE_LINES = 450  # STYLE.md: aim for 80-300 lines a module, split past ~500; issue 17 set the bar here


def test_no_module_is_over_the_line_limit() -> None:
    long = {name: n for name, path in module_table.package_modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these modules by concern (at most {MAX_MODULE_LINES} lines each): {long}"


LOOP = REPO / "appliance" / "loop.py"
MAX_LOOP_LINES = 200  # issue 32: the reconciler only; a phase's body lives in appliance/phases


def test_the_loop_is_a_reconciler_that_dispatches_through_the_phase_table_only() -> None:
    from appliance.loop import Loop
    from appliance.phases import BASELINE_PHASES, PHASE_TABLE, PHASES
    from appliance.schemas import Phase

    source = LOOP.read_text()
    assert len(source.splitlines()) < MAX_LOOP_LINES
    tree = ast.parse(source)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not names & {"getattr", "hasattr", "setattr"}, "the loop reads only state it declares"
    # the one call of a phase: the table, indexed by the iteration's phase, with the context and the index
    dispatches = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)]
    assert [ast.unparse(n) for n in dispatches] == ["self.phases[current.phase](self.context, current.index)"]
    assert not [m for m in vars(Loop) if m.startswith("phase_")], "phase bodies belong in appliance/phases"
    assert set(PHASE_TABLE) == set(Phase) - {Phase.DONE} == set(BASELINE_PHASES) | set(PHASES)
