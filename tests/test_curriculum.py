"""The curriculum in the loop: the controller's decisions at DIAGNOSE (iteration 0 too) and the rounds it plans."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from appliance.config import Settings
from appliance.curriculum import control, synthesize_round
from appliance.loop import Loop
from appliance.phases.diagnose import diagnose
from appliance.schemas import CapabilityReport, Outcome, Rollout, RolloutStatus, Split, TaskStatus
from appliance.store import Store

FAMS = ["files", "text", "data"]


def loop(settings: Settings, store: Store) -> Loop:
    settings.loop.families = FAMS
    settings.loop.heldout_levels = [2]
    settings.loop.heldout_per_cell = 1
    settings.loop.analysis = False
    engine = SimpleNamespace(policy_version=0, base_url="http://unused", model_name=lambda: "policy")
    return Loop(settings, store, engine, practice=None, log=lambda _: None)


def practise(store: Store, run_id: str, iteration: int, passed_by_family: dict[str, int], k: int = 4) -> None:
    """Stand-in for PRACTISE: k rollouts per task of the iteration, `passed` of them succeed, bands recorded."""
    from appliance.tasks.pool import record_band

    for t in store.tasks(run_id, split=Split.TRAIN, status=TaskStatus.VALID, iteration=iteration):
        wins = passed_by_family.get(t.family, 0)
        for j in range(k):
            rid = f"{t.id}.g{iteration}.{j}"
            store.add_rollout(Rollout(rid, run_id, t.id, f"{t.id}.g{iteration}", iteration, "builtin", 0,
                                      RolloutStatus.PENDING, "train"))
            store.start_rollout(rid)
            store.finish_rollout(rid, Outcome.SUCCESS if j < wins else Outcome.FAILURE, float(j < wins))
        record_band(store, t.id, wins, k)


def test_iteration_0_plans_and_families_climb_with_replay(settings: Settings, store: Store) -> None:
    lp = loop(settings, store)
    run = lp.run.id
    settings.loop.tasks_per_family = 4
    settings.loop.start_level = 1  # the climb from the spelled-out level (a loop without demonstrations)
    diagnose(lp.context, 0)  # the baseline plans too
    report0, md0 = store.report(run, 0)
    assert report0.levels == {f: 1 for f in FAMS} and set(report0.decisions) == set(FAMS)
    assert "## Controller decisions" in md0

    store.start_iteration(run, 1, 0)
    made = synthesize_round(store, settings, run, 1, FAMS)
    assert made["made"]["new"] == 9 and made["made"]["stretch"] == 3 and made["made"]["replay"] == 0
    new = store.tasks(run, split=Split.TRAIN)
    assert sorted({t.difficulty for t in new if t.family == "files"}) == [1, 2]
    for t in new:  # stands in for VALIDATE
        store.set_task_status(t.id, TaskStatus.VALID)
    # files: all pass (mastered); text: half (learnable: replayed); data: nothing
    practise(store, run, 1, {"files": 4, "text": 2, "data": 0})
    diagnose(lp.context, 1)
    report1, md1 = store.report(run, 1)
    assert report1.levels == {"files": 2, "text": 1, "data": 1}
    assert report1.mastered == {"files": 1, "text": 0, "data": 0}
    assert "moves up to L2" in report1.decisions["files"]["reason"]
    assert "nothing passes yet" in report1.decisions["data"]["reason"]
    assert report1.band_levels["files"]["1"] == {"too_easy": 3}
    assert report1.capability["text"]["1"]["passed"] == 6

    store.start_iteration(run, 2, 0)
    made = synthesize_round(store, settings, run, 2, FAMS)
    assert made["made"]["replay"] == 1  # text's learnable tasks come back, one per round at this share
    copies = [t for t in store.tasks(run, split=Split.TRAIN) if t.spec["meta"].get("round") == "replay"]
    assert len(copies) == 1 and copies[0].family == "text" and copies[0].status == TaskStatus.VALID
    assert copies[0].iteration == 2 and copies[0].id.endswith(".r2")
    assert copies[0].spec["meta"]["iteration"] == 2  # kept in the spec as provenance for exported task files
    assert {t.difficulty for t in store.tasks(run, split=Split.TRAIN, iteration=2) if t.family == "files"} == {2, 3}

    # a failing frontier is never sent back below what was mastered
    store.start_iteration(run, 3, 0)
    report2 = CapabilityReport(iteration=2, train={"files": {"2": {"n": 12, "passed": 0, "pass_rate": 0.0}}})
    report1.iteration = 2
    store.save_report(run, 2, report1, "")
    out = control(store, run, 3, FAMS, report2, settings)
    assert out["files"].level == 2 and out["files"].mastered == 1


def test_a_run_starts_at_level_2_and_climbs_a_stuck_frontier_by_hinted_rungs(settings: Settings,
                                                                            store: Store) -> None:
    lp = loop(settings, store)
    run = lp.run.id
    settings.loop.tasks_per_family = 4  # 1 stretch, 3 new (no replay yet)
    diagnose(lp.context, 0)
    assert store.report(run, 0)[0].levels == {f: 2 for f in FAMS}  # loop.start_level's default

    store.start_iteration(run, 1, 0)
    synthesize_round(store, settings, run, 1, FAMS)
    files = [t for t in store.tasks(run, split=Split.TRAIN) if t.family == "files"]
    by_rung = sorted((t.difficulty, t.spec["meta"]["round"], t.spec["meta"]["hint"]) for t in files)
    # nothing passes at the frontier yet: one of its three new tasks carries the start of the command
    assert by_rung == [(2, "new", ""), (2, "new", ""), (2, "new", "partial"), (3, "stretch", "partial")]
    hinted = next(t for t in files if t.difficulty == 2 and t.spec["meta"]["hint"])
    assert "Hint: the command starts like this" in hinted.spec["instruction"]
    assert len({t.spec["id"] for t in files}) == 4

    for t in store.tasks(run, split=Split.TRAIN):
        store.set_task_status(t.id, TaskStatus.VALID)
    # every hinted files task passes 4 of 4, its bare ones 1 of 4: the hint works, the level is not mastered
    from appliance.tasks.pool import record_band

    for t in store.tasks(run, split=Split.TRAIN, status=TaskStatus.VALID, iteration=1):
        wins = 4 if t.spec["meta"]["hint"] else int(t.family == "files")
        for j in range(4):
            rid = f"{t.id}.g1.{j}"
            store.add_rollout(Rollout(rid, run, t.id, f"{t.id}.g1", 1, "builtin", 0, RolloutStatus.PENDING, "train"))
            store.start_rollout(rid)
            store.finish_rollout(rid, Outcome.SUCCESS if j < wins else Outcome.FAILURE, float(j < wins))
        record_band(store, t.id, wins, 4)
    diagnose(lp.context, 1)
    report1, _ = store.report(run, 1)
    assert report1.train["files"]["2"]["passed"] == 6 and report1.train_bare["files"]["2"]["passed"] == 2
    assert report1.band_levels["files"]["2"] == {"learnable": 2}  # the hinted task's too_easy is not counted
    assert report1.levels["files"] == 2 and report1.mastered["files"] == 0
    assert "2/8 unhinted practice rollouts at L2" in report1.decisions["files"]["reason"]
    # text's bare tasks all failed: still stuck, so its next round is hinted again; files' is not
    store.start_iteration(run, 2, 0)
    synthesize_round(store, settings, run, 2, FAMS)
    round2 = store.tasks(run, split=Split.TRAIN, iteration=2)
    assert {t.spec["meta"]["hint"] for t in round2 if t.family == "files" and t.spec["meta"]["round"] != "replay"} \
        == {"", "tool"}
    assert "partial" in {t.spec["meta"]["hint"] for t in round2 if t.family == "text"}


def test_self_proposal_asks_the_policy_for_whole_tasks_and_zero_turns_it_off(settings: Settings,
                                                                             store: Store) -> None:
    lp = loop(settings, store)
    answer = ("INSTRUCTION\n```text\nWrite hi into a.txt.\n```\nVERIFY\n```bash\ngrep -qx hi a.txt\n```\n"
              "SOLUTION\n```bash\necho hi > a.txt\n```\n")
    asked: list[tuple[str, int | None, float | None]] = []

    def policy(prompt: str, *, max_tokens: int | None = None, temperature: float | None = None) -> str:
        asked.append((prompt, max_tokens, temperature))
        return answer

    assert Settings.model_fields["loop"].default_factory().propose == 8  # on by default
    settings.loop.propose = 0
    made = synthesize_round(store, settings, lp.run.id, 1, FAMS, policy)
    assert asked == [] and "proposed" not in made["made"]
    assert store.metric_series(lp.run.id, "propose_asked") == []
    settings.loop.propose = 3
    made = synthesize_round(store, settings, lp.run.id, 2, FAMS, policy)
    # a whole task's tokens and a temperature, not the analysis's short greedy call
    assert len(asked) == 3 and {(m, t) for _, m, t in asked} == {(512, 0.7)}
    assert made["made"]["proposal_parsed"] == 3 and made["made"]["proposed"] >= 1
    proposed = [t for t in store.tasks(lp.run.id) if t.source == "self_proposed"]
    assert proposed and all(t.status == TaskStatus.PROPOSED and t.iteration == 2 for t in proposed)
    assert store.metric_series(lp.run.id, "propose_asked") == [(2, 3.0)]
    assert store.metric_series(lp.run.id, "propose_parsed") == [(2, 3.0)]


@pytest.mark.slow
@pytest.mark.parametrize("warmstart_first", [False, True])
def test_one_climbing_iteration_through_the_real_phases(sandbox_settings: Settings, tmp_path,
                                                        warmstart_first: bool) -> None:
    """SYNTHESIZE .. DIAGNOSE on real sandboxes, a policy that answers each task's reference solution, the
    fake engine (training fails for want of a model: the loop goes on, as it does in production). With
    `loop.warmstart_first`, iteration 1 practises nothing and its LEARN phase is the warm-start alone."""
    import json as _json

    import httpx

    from appliance.practice import Practice
    from appliance.proxy.routes import hash_token
    from appliance.sandbox import SandboxPool
    from appliance.testing import FakeEngine
    from test_demonstrations import char_tokenize  # tests/test_demonstrations.py

    settings = sandbox_settings.model_copy(deep=True)
    settings.home = tmp_path / "home"
    settings.engine.model = tmp_path / "no-model"
    settings.loop.families = ["files"]
    settings.loop.tasks_per_family = 2
    settings.loop.group_size = 2
    settings.loop.heldout_levels = [2]
    settings.loop.heldout_per_cell = 1
    settings.loop.analysis = False
    settings.training.demo_warmstart_levels = [2]
    settings.training.demo_warmstart_tasks = 1
    settings.loop.warmstart_first = warmstart_first
    settings.evaluation.samples_per_task = 2
    # 66 dev tasks x k answered `true` would only add minutes (tests/test_evaluate.py)
    settings.evaluation.devset = False
    store = Store(settings.db_path)

    def answer(request: httpx.Request) -> httpx.Response:
        # the policy "knows" each task's reference solution: the route's token names the rollout, hence the
        # task (two tasks may share a request and differ in a file it does not name: "the only .log file")
        messages = _json.loads(request.content)["messages"]
        token = request.url.path.split("/")[2]
        rollout = store.rollout_by_route(hash_token(token))
        solution = store.get_task(rollout.task_id).spec["solution"].strip() if rollout and rollout.task_id else "true"
        content = "DONE" if len(messages) > 2 else f"```bash\n{solution}\n```"
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": content}}],
                                         "usage": {"completion_tokens": 3}})

    practice = Practice(settings, store, "127.0.0.1", 9, SandboxPool(settings, 2, sweep_orphans=False),
                        log=lambda _: None, client_transport=httpx.MockTransport(answer))
    lp = Loop(settings, store, FakeEngine(), practice, log=lambda _: None, chat_tokenizer=char_tokenize)
    run = lp.run.id
    while lp.tick():
        if store.iterations(run)[-1].index > 1:
            break
    its = store.iterations(run)
    assert [i.status for i in its[:2]] == ["done", "done"], [(i.index, i.phase, i.error) for i in its]
    demos = store.demonstrations(run)
    assert {d.origin for d in demos} == {"reference"} and any(d.difficulty == 2 for d in demos)
    report, md = store.report(run, 1)
    assert report.evaluation["n"] == 2 and report.evaluation["k"] == 2  # one held-out task x k=2
    assert "files" in report.decisions and "## Controller decisions" in md
    events = [e.message for e in store.events(run)]
    assert any("warm-start SFT on" in m for m in events), events
    rollouts = store.rollouts(run, iteration=1, purpose="train")
    if warmstart_first:  # nothing practised before the warm-start: the report has no practice to show
        assert not rollouts and any("the warm-start SFT comes first" in m for m in events), events
        assert "3" not in report.capability.get("files", {})  # no practice (only held-out L2)
        store.close()
        return
    # practice at the start level (L2) and the stretch level: every reference passes, `ln -s` included
    failed = [(r.id, r.purpose, r.status, r.outcome, r.error) for r in store.rollouts(run) if r.outcome != "success"]
    for level in ("2", "3"):
        cell = report.capability["files"][level]
        assert cell["passed"] == cell["n"] > 0, (level, cell, failed)
    assert rollouts and all(r.outcome == "success" for r in rollouts), failed
    store.close()
