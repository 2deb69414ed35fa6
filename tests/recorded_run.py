"""A small, fixed run as the loop records one, for the TUI tests and benchmark (snapshot-stable timestamps)."""

from __future__ import annotations

from appliance.schemas import (
    CapabilityReport,
    EngineState,
    Event,
    IterationStatus,
    ModelCall,
    Outcome,
    Phase,
    Rollout,
    RolloutStatus,
    Sample,
    Split,
    Task,
    TaskStatus,
)
from appliance.store import Store

T0 = 1_790_000_000.0  # fixed timestamps keep snapshot tests byte-stable

TOY_VOCAB = ["<s>", "system", "user", "assistant", "tool", "\n", " ls", " -la", " cat", " notes.txt", " echo",
             " hello", " >", " out.txt", "```", "bash", " done", " file", " total", " 4", " wc", " -l", " 3"]


def toy_decoder(ids: list[int]) -> list[str]:
    """A stand-in tokenizer for the recorded run's token ids (0..len(TOY_VOCAB)-1)."""
    return [TOY_VOCAB[i] if 0 <= i < len(TOY_VOCAB) else f"<{i}>" for i in ids]


def record_run(store: Store, run_id: str = "demo", *, t0: float = T0) -> str:
    """Fill `store` with a small, fixed run as the loop records one: two finished iterations with reports
    and held-out evals, a third in the middle of training, a task pool in every status, a GRPO step of
    groups in every state, and rollouts whose model calls extend each other and branch once."""
    store.create_run(run_id, {"profile": "cpu"})
    store.set_engine_state(EngineState.STARTING, force=True)
    store.set_engine_state(EngineState.SERVING, policy_version=2)
    phases = [p for p in Phase if p != Phase.DONE]
    durations = [40, 65, 250, 90, 70, 20]
    t = t0
    for idx in range(3):
        store.start_iteration(run_id, idx, policy_version=idx)
        upto = phases if idx < 2 else phases[:4]
        for phase, d in zip(upto, durations):
            store.set_iteration_phase(run_id, idx, phase)
            store.add_event(Event("phase", str(phase), run_id, {"iteration": idx}, created_at=t))
            t += d
        if idx < 2:
            store.set_iteration_phase(run_id, idx, Phase.DONE)
            store.set_iteration_status(run_id, idx, IterationStatus.DONE)
            for family, base in (("files", 0.5), ("shell", 0.2), ("git", 0.1)):
                store.set_eval(run_id, idx, idx, family, 1, 10, round(10 * (base + 0.15 * idx)))
            store.save_report(run_id, idx, CapabilityReport(iteration=idx), report_markdown(idx))
    store.add_event(Event("error", "sandbox r-2-1-3 died: OOM", run_id, {"iteration": 2}, created_at=t - 100))
    store.add_event(Event("info", "practise: 24 rollouts, 2 infra errors", run_id, {"iteration": 2}, 250.0,
                          created_at=t - 95))
    for step in range(12):
        store.add_metrics(run_id, step, {"reward_mean": 0.1 + 0.03 * step + (0.04 if step % 3 == 0 else 0),
                                         "infra_error_rate": 0.08 if step in (4, 9) else 0.02})
    store.add_metrics(run_id, 11, {"logprob_gap_mean": 0.012, "loss": 0.31})
    for step in range(11):
        store.add_metrics(run_id, step, {"loss": 0.9 - 0.05 * step})

    statuses = [TaskStatus.PROPOSED, TaskStatus.VALID, TaskStatus.LEARNABLE, TaskStatus.LEARNABLE,
                TaskStatus.TOO_EASY, TaskStatus.TOO_HARD, TaskStatus.REJECTED]
    n = 0
    for family in ("files", "git", "shell"):
        for difficulty in (1, 2):
            for k, status in enumerate(statuses[: 4 + difficulty + (family == "shell")]):
                n += 1
                tid = f"{family}-{difficulty}-{k}"
                spec = {"id": tid, "family": family, "difficulty": difficulty,
                        "instruction": f"Write 'hello' into out.txt ({family}, level {difficulty}).",
                        "files": {"notes.txt": "a\nb\nc\n"}, "verify": "test \"$(cat out.txt)\" = hello",
                        "solution": "echo hello > out.txt"}
                store.add_task(Task(tid, run_id, family, difficulty, "procedural",
                                    Split.HELDOUT if k == 0 and difficulty == 1 else Split.TRAIN, status, spec,
                                    "reference solution fails the verifier" if status == TaskStatus.REJECTED else None,
                                    {TaskStatus.LEARNABLE: 0.5, TaskStatus.TOO_EASY: 1.0,
                                     TaskStatus.TOO_HARD: 0.0}.get(status), created_at=t0 + n))
    rollouts = []
    outcomes = [Outcome.SUCCESS, Outcome.FAILURE, Outcome.TRUNCATED, Outcome.INFRA_ERROR]
    for g, task in enumerate(["files-1-2", "files-2-3", "git-1-2", "shell-1-2", "shell-2-2", "git-2-3"]):
        for r in range(4):
            status = RolloutStatus.FINISHED if g < 4 else RolloutStatus.RUNNING if g == 4 else RolloutStatus.PENDING
            outcome = outcomes[(g + r) % 4] if status == RolloutStatus.FINISHED else None
            reward = {Outcome.SUCCESS: 1.0, Outcome.FAILURE: 0.0, Outcome.TRUNCATED: 0.0}.get(outcome)
            rollouts.append(Rollout(f"r-2-{g}-{r}", run_id, task, f"g-2-{g}", 2, "bash-agent", 2, status, "train",
                                    outcome, reward, "sandbox died: OOM" if outcome == Outcome.INFRA_ERROR else None,
                                    3 if status == RolloutStatus.FINISHED else 0, created_at=t0 + 1000 + 4 * g + r))
    store.add_rollouts(rollouts)
    # r-2-0-0: three calls; call 1 extends call 0, call 2 rewrites history (a compaction) and branches
    system = [0, 1, 5, 2, 10, 11, 12, 13, 5, 3]
    c0 = [14, 15, 6, 7, 14]
    tool0 = [5, 4, 18, 19, 5, 3]
    c1 = [14, 15, 10, 11, 12, 13, 14]
    calls = [ModelCall(None, "r-2-0-0", 0, "ok", {"messages": []}, None, system, c0, [-0.1, -0.2, -1.3, -0.4, -0.1],
                       2, 0.41, created_at=t0 + 1001),
             ModelCall(None, "r-2-0-0", 1, "ok", {"messages": []}, None, system + c0 + tool0, c1,
                       [-0.05, -0.1, -0.9, -0.2, -0.3, -0.2, -0.1], 2, 0.38, created_at=t0 + 1002),
             ModelCall(None, "r-2-0-0", 2, "ok", {"messages": []}, None, system + [4, 16, 5, 3], [16],
                       [-0.5], 2, 0.12, created_at=t0 + 1003)]
    store.add_model_calls(calls)
    seq0 = system + c0 + tool0 + c1
    store.add_samples([
        Sample("r-2-0-0", "g-2-0", 0, seq0, [0] * len(system) + [1] * len(c0) + [0] * len(tool0) + [1] * len(c1),
               [0.0] * len(seq0), 2, 0.75),
        Sample("r-2-0-0", "g-2-0", 1, system + [4, 16, 5, 3, 16], [0] * (len(system) + 4) + [1],
               [0.0] * (len(system) + 5), 2, 0.75)])
    store.set_engine_state(EngineState.DRAINING)
    store.set_engine_state(EngineState.SLEEPING)
    return run_id


def report_markdown(idx: int) -> str:
    rates = {"files": 0.5 + 0.15 * idx, "shell": 0.2 + 0.15 * idx, "git": 0.1 + 0.15 * idx}
    rows = "\n".join(f"| {f} | 1 | {r:.2f} |" for f, r in rates.items())
    regress = "- none" if idx == 0 else "- git-1-1: passed in iteration 0, fails now"
    return (f"# Capability report, iteration {idx}\n\n## Pass rate\n\n| family | difficulty | pass@1 |\n"
            f"| --- | --- | --- |\n{rows}\n\n## Failure modes\n\n- wrong answer: {12 - 3 * idx}\n"
            f"- bad tool call format: {6 - idx}\n- turn limit: 3\n\n## Regressions\n\n{regress}\n")

