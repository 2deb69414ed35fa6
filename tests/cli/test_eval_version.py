"""`appliance eval --version N` on any stored policy version: the engine serves that version's weights for the
evaluation only (the store still says the loop's version is served), takes no new weights, and a version that
is not stored (or whose files are gone) is refused before anything is validated or started."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from appliance.cli import main
from appliance.config import Settings, load_settings
from appliance.errors import EngineError
from appliance.schemas import EngineState, Outcome
from appliance.serving import Engine, Weights
from appliance.serving.weights import stored_weights
from appliance.store import Store
from appliance.tasks.families import synthesize
from appliance.tasks.foreign import TaskSet

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harbor"


def _lineage(store: Store, tmp_path: Path) -> tuple[Path, Path]:
    """A lineage with version 1 (full weights) and version 2 (an adapter trained on version 1); the loop
    serves version 2."""
    store.start_lineage({"path": str(tmp_path / "base"), "name": "base", "content_hash": "h"}, "test")
    (tmp_path / "base").mkdir(exist_ok=True)
    full, adapter = tmp_path / "ck" / "v1", tmp_path / "ck" / "v2"
    full.mkdir(parents=True)
    adapter.mkdir(parents=True)
    store.add_policy_version(1, 0, "full", str(full))
    store.add_policy_version(2, 1, "lora", str(adapter))
    served = Weights(full, adapter, "policy-v2").to_json()
    store.set_engine_state(EngineState.STOPPED, policy_version=2, weights=served, force=True)
    return full, adapter


def test_a_stored_version_is_found_with_the_weights_it_was_served_on(settings: Settings, store: Store,
                                                                      tmp_path: Path) -> None:
    full, adapter = _lineage(store, tmp_path)
    assert stored_weights(store, tmp_path / "base", 0, "policy") == Weights(tmp_path / "base")
    assert stored_weights(store, tmp_path / "base", 1, "policy") == Weights(full)
    assert stored_weights(store, tmp_path / "base", 2, "policy") == Weights(full, adapter, "policy-v2")
    with pytest.raises(EngineError, match=r"policy version 7 is not stored .*\(its versions: 0, 1, 2\)"):
        stored_weights(store, tmp_path / "base", 7, "policy")
    adapter.rmdir()
    with pytest.raises(EngineError, match="the weights of policy version 2 are gone"):
        stored_weights(store, tmp_path / "base", 2, "policy")


def test_an_engine_serving_a_stored_version_never_records_it_as_served(settings: Settings, store: Store,
                                                                       tmp_path: Path) -> None:
    _lineage(store, tmp_path)
    before = store.engine_state()
    engine = Engine(settings, store, version=1)
    assert engine.policy_version == 1
    engine._set(EngineState.STARTING, force=True)  # what start() and the supervisor record, in turn
    engine._set(EngineState.SERVING, policy_version=1, weights=Weights(tmp_path / "ck" / "v1").to_json())
    assert store.engine_state() == (EngineState.SERVING, 2, before[2])  # the loop's next start serves v2
    with pytest.raises(EngineError, match="serves stored policy version 1 for an evaluation"):
        engine.load_weights(tmp_path / "ck" / "v3", "full")
    assert Engine(settings, store).policy_version == 2  # unpinned: what the store says


def _run(args: list[str], home: Path):
    env = {"APPLIANCE_HOME": str(home), "APPLIANCE_ENGINE__MODEL": str(home / "base")}
    return CliRunner().invoke(main, args, env=env, catch_exceptions=False)


def test_eval_serves_the_version_asked_and_stores_its_figures_under_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(environ={"APPLIANCE_HOME": str(tmp_path)})
    settings.db_path.parent.mkdir(parents=True, exist_ok=True)
    store = Store(settings.db_path)
    _lineage(store, tmp_path)
    store.close()
    specs = synthesize("files", 2, 2, seed="v")
    served: list[int | None] = []

    @contextmanager
    def services(_settings, store, log, version=None):
        served.append(version)
        yield SimpleNamespace(engine=SimpleNamespace(policy_version=version), practice=SimpleNamespace(store=store))

    def practice_runner(practice, on_rollout):
        def run(work):
            for _spec, r in work:
                practice.store.start_rollout(r.id)
                practice.store.finish_rollout(r.id, Outcome.FAILURE, 0.0)
                on_rollout(practice.store.get_rollout(r.id))
        return run

    monkeypatch.setattr("appliance.tasks.foreign.validate_sets",
                        lambda *_a, **_k: (TaskSet(specs=specs, paths={s.id: s.id for s in specs}), {}))
    monkeypatch.setattr("appliance.app.services", services)
    monkeypatch.setattr("appliance.benchmark.practice_runner", practice_runner)
    r = _run(["eval", str(FIXTURES / "api-fix"), "--version", "1", "--attempts", "1", "--json"], tmp_path)
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert served == [1] and summary["policy_version"] == 1 and (summary["passed"], summary["n"]) == (0, 2)
    assert all(line.split()[1] == "failure" for line in r.stderr.splitlines()[-2:])  # a line per rollout
    store = Store(settings.db_path)
    (row,) = store.eval_sets()
    assert row["policy_version"] == 1 and store.engine_state()[1] == 2
    store.close()
    r = _run(["eval", str(FIXTURES / "api-fix"), "--base", "--attempts", "1"], tmp_path)
    assert r.exit_code == 0 and served == [1, 0] and "policy version 0, pass@1 0.0%" in r.stdout, r.output
