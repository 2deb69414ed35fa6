"""Teacher-free demonstrations: a task's verified reference solution, as the episode the agent should have had.

Every valid task carries a reference solution that passed its verifier twice. `demonstrate` runs it the
way the built-in harness runs an agent's command and records the conversation the harness would have
produced: its own first messages (system prompt, `Task: ...`), one assistant turn with the whole solution
in a ```bash block, the real observation from a fresh hardened sandbox formatted by the harness's own
`format_observation`, and the finishing `DONE`; around the solution, the task's episode shape
(`episode_shapes`: a look first, a check after, or a masked-out slip to recover from) adds real turns.
The final workspace then goes through `verify_workspace`,
exactly like a rollout's; only a passing conversation becomes a demonstration.

    run = demonstrate(settings, spec)                       # one sandbox, the verifier in another
    demo = to_demonstration(run, spec, chat_tokenizer(settings.model_path), run_id=..., task_id=...)
    store.add_demonstration(demo)

Hindsight relabelling (a hinted success as a demonstration of the bare request) is `appliance.hindsight`.

Demonstrations are training data for SFT only. Their ids come from the served model's own chat template,
turn by turn as the engine would render each prompt (`appliance.serving.template`: no generation markers
needed, one sequence per turn where the template is not prefix-stable), so they are re-tokenized text,
stored apart from RL samples (a table of their own), and never enter a GRPO batch: RL samples stay the
engine's exact tokens.
"""

from __future__ import annotations

import hashlib
import json
import random
import shlex
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from appliance import episode_shapes
from appliance.config import Settings
from appliance.errors import ApplianceError, SandboxStorageFull
from appliance.harness.actions import parse_action
from appliance.harness.base import Limits
from appliance.harness.builtin import first_messages, observation_messages, request_of
from appliance.schemas import Demonstration, Sample, Split, Task, TaskStatus
from appliance.seams import ChatTokenizer
from appliance.store import Store
from appliance.tasks import TaskSpec, verify_workspace
from appliance.tasks.validate import SandboxStarter, write_workspace

REFERENCE, HINDSIGHT, SUCCESS = "reference", "hindsight", "success"
FINISH = "DONE"  # the finishing turn the system prompt teaches


def command_block(command: str) -> str:
    """An assistant answer that runs `command`, written the way the system prompt's example writes one."""
    return f"```bash\n{command.strip()}\n```"


@dataclass(slots=True)
class DemoRun:
    """What running a reference solution through the harness's formatting gave."""

    messages: list[dict[str, Any]]
    passed: bool
    error: str | None = None  # the machine failed (sandbox, verifier): no verdict on the task
    verifier_output: str = ""
    untrained: tuple[int, ...] = ()  # assistant turns (0 = the first) shown as context, never trained: mistakes


def demonstrate(settings: Settings, spec: TaskSpec, *, start: SandboxStarter | None = None,
                limits: Limits | None = None, shape: str = "solve") -> DemoRun:
    """Run the reference solution as an agent episode of `shape` (`episode_shapes`) in a fresh sandbox;
    never raises for the machine's failures."""
    from appliance.sandbox import Sandbox

    starter = start or (lambda **kw: Sandbox.start(settings, **kw))
    limits = limits or Limits.from_settings(settings.harness)
    limits = replace(limits, max_turns=min(limits.max_turns, spec.limits.max_turns))  # as practice caps it
    messages = first_messages(request_of(spec.instruction, spec.answer))
    answer = {"role": "assistant", "content": command_block(spec.solution)}
    action = parse_action(answer)
    if action.command is None or action.command.strip() != spec.solution.strip():
        # the harness would not run this solution verbatim from a fenced block (e.g. it holds ```)
        return DemoRun(messages, False, None, "the solution does not survive the harness's command parser")
    workspace = settings.home / "demonstrations" / uuid.uuid4().hex[:12]
    workspace.mkdir(parents=True)
    untrained: list[int] = []
    try:
        write_workspace(spec, workspace)
        timeout = min(limits.command_timeout_s, spec.limits.command_timeout_s)
        with starter(workspace=workspace, labels={"appliance.demonstration": spec.id}) as sb:
            if spec.setup.strip():
                setup = sb.exec(spec.setup, timeout=spec.limits.setup_timeout_s)
                if setup.exit_code != 0:
                    return DemoRun(messages, False, f"task set-up failed ({setup.exit_code})")
            shell = sb.shell()

            def turn(command: str, keep: Callable[[Any], bool] = lambda _: True, trained: bool = True) -> Any:
                """Run one agent turn; its result when `keep` accepts it (then it joins the episode), else None."""
                said = {"role": "assistant", "content": command_block(command)}
                act = parse_action(said)
                if act.command is None:
                    return None
                result = shell.run(act.command, timeout)
                if not keep(result):
                    return None
                if not trained:
                    untrained.append(sum(m["role"] == "assistant" for m in messages))
                messages.extend([said, *observation_messages(act, result, limits, timeout)])
                return result

            hidden = [name for name in episode_shapes.unseen_names(spec.instruction, spec.solution)
                      if sb.exec(f"test -e {shlex.quote(name)}", timeout=30).exit_code == 0]
            edited = [name for name in episode_shapes.edited_files(spec.solution)
                      if sb.exec(f"test -f {shlex.quote(name)}", timeout=30).exit_code == 0]
            first_attempt = str(spec.meta.get("first_attempt") or "")

            def room(commands: int) -> bool:
                """Whether `commands` more command turns, then DONE, fit the turn limit."""
                return sum(m["role"] == "assistant" for m in messages) + commands + 1 <= limits.max_turns

            if shape == "look" or hidden:
                def shows_every_hidden_name(r: Any) -> bool:
                    return r.exit_code == 0 and all(PurePosixPath(n).name in r.stdout for n in hidden)

                # a look the solution needs is a lesson; one it does not is context only (see episode_shapes)
                for look in episode_shapes.look_commands(spec.instruction, deep=bool(hidden)):
                    if room(2) and turn(look, keep=shows_every_hidden_name, trained=bool(hidden)) is not None:
                        break
            for name in edited:  # what an in-place edit quotes is read first, as the agent must (a lesson)
                if room(2):
                    turn(episode_shapes.read_command(name, spec.solution),
                         keep=lambda r: r.exit_code == 0 and not r.timed_out)
            if first_attempt and room(2):
                # a trapped task: the obvious attempt really fails (context), and the solution reads the error
                turn(first_attempt, keep=lambda r: r.exit_code != 0 and not r.timed_out, trained=False)
            elif shape == "recover" and room(2) and (slip := episode_shapes.mistaken(spec.solution)):
                wrong, program = slip
                if sb.exec(f"command -v {shlex.quote(program)}", timeout=30).exit_code != 0:  # truly no such program
                    turn(wrong, keep=lambda r: r.exit_code == 127, trained=False)
            elif shape == "fix":
                shape = "check" if not (room(3) and _printed_then_checked(sb, spec, turn)) else shape
            result = turn(spec.solution)  # parsed back to itself above, and always kept
            if shape == "check" and result.exit_code == 0 and room(1):
                for check in episode_shapes.check_candidates(spec.instruction):
                    target = episode_shapes.check_target(check)
                    if target and sb.exec(f"test -e {shlex.quote(target)}", timeout=30).exit_code != 0:
                        continue
                    if turn(check, keep=lambda r: r.exit_code == 0 and not r.timed_out, trained=False) is not None:
                        break
        # a question task's answer is the solution's output, said on the line before DONE
        said = result.stdout.strip() if spec.answer else ""
        messages.append({"role": "assistant", "content": f"{said}\n{FINISH}" if said else FINISH})
        verdict = verify_workspace(settings, spec, workspace, start=start, archive=sb.copied_out, answer=said)
        if verdict.error:
            return DemoRun(messages, False, f"verifier: {verdict.error}", verdict.output)
        return DemoRun(messages, verdict.passed and not verdict.tampered, None, verdict.output, tuple(untrained))
    except SandboxStorageFull:  # no demonstration can run: the phase fails with the cause
        raise
    except ApplianceError as e:
        return DemoRun(messages, False, f"{type(e).__name__}: {e.message}")
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def _printed_then_checked(sb: Any, spec: TaskSpec, turn: Callable[..., Any]) -> bool:
    """The fix shape's first two turns (`episode_shapes`): the solution's output printed instead of written
    (context), then a look at the file it should have made, which really is missing (trained). False, with
    nothing shown, when the solution does not allow it or the slip printed nothing; the slip only reads."""
    slip = episode_shapes.printed_instead(spec.solution, spec.instruction)
    if slip is None:
        return False
    printed, target = slip
    if sb.exec(f"test -e {shlex.quote(target)}", timeout=30).exit_code == 0:
        return False  # the file is there before the solution: a look at it would find no mistake
    if turn(printed, keep=lambda r: r.exit_code == 0 and bool(r.stdout.strip()) and not r.timed_out,
            trained=False) is None:
        return False
    return turn(f"head -n 20 {shlex.quote(target)}", keep=lambda r: r.exit_code != 0) is not None


def chat_tokenizer(model_path: Path) -> ChatTokenizer:
    """The served model's tokenizer and chat template (`appliance.serving.template`)."""
    from appliance.serving.template import ChatTemplate

    return ChatTemplate(model_path)


def digest(messages: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()


def to_demonstration(messages: list[dict[str, Any]], task: Task, tokenize: ChatTokenizer, *, origin: str = REFERENCE,
                     iteration: int | None = None, untrained: tuple[int, ...] = (),
                     tools: list[dict[str, Any]] | None = None) -> Demonstration:
    """Raises ApplianceError when the template cannot render the conversation (the caller's one failure)."""
    sequences = tokenize(messages, untrained=untrained, tools=tools)
    return Demonstration.of_sequences(sequences, run_id=task.run_id, task_id=task.id, family=task.family,
                                      difficulty=task.difficulty, origin=origin, messages=messages,
                                      digest=digest(messages), iteration=iteration)


@dataclass
class DemoYield:
    """What one pass of `demonstrate_tasks` did: for the report and the event log."""

    added: int = 0
    failed: list[str] = field(default_factory=list)  # task ids whose reference run did not pass
    infra: list[str] = field(default_factory=list)  # task ids the machine failed on (tried again next pass)
    unrendered: dict[str, str] = field(default_factory=dict)  # task id -> why the chat template could not render it

    def as_dict(self) -> dict[str, Any]:
        return {"added": self.added, "failed": len(self.failed), "infra": len(self.infra),
                "unrendered": len(self.unrendered)}


def demonstrate_tasks(settings: Settings, store: Store, tasks: Iterable[Task], tokenize: ChatTokenizer, *,
                      iteration: int | None = None, start: SandboxStarter | None = None,
                      parallel: int = 2, stopping: threading.Event | None = None) -> DemoYield:
    """Demonstrations of the training tasks that passed validation and have none yet (idempotent).

    Once `stopping` is set no new demonstration starts (a shutdown must not wait minutes for the pool, nor
    run reference solutions while the sandboxes are being torn down); the missing ones are made next time."""
    done = set()
    todo = []
    for t in tasks:
        if t.split != Split.TRAIN or t.status in (TaskStatus.PROPOSED, TaskStatus.REJECTED) or t.id in done:
            continue
        done.add(t.id)
        todo.append(t)
    have = store.demonstrated_task_ids(todo[0].run_id) if todo else set()
    todo = [t for t in todo if t.id not in have]
    out = DemoYield()
    if not todo:
        return out
    # each demonstration is stored as soon as it is made: a pool of hundreds takes minutes, and a stop or a
    # crash part-way must not throw the finished ones away (the next pass makes only the missing ones)
    def run(task: Task) -> DemoRun | None:
        if stopping is not None and stopping.is_set():
            return None
        try:
            return demonstrate(settings, TaskSpec.of(task), start=start,
                               shape=episode_shapes.shape_of(task.id, tuple(settings.training.demo_shapes)))
        except SandboxStorageFull:
            raise
        except Exception as e:  # noqa: BLE001 - as in validation: one task's surprise is that task's failure
            return DemoRun([], False, None, f"{type(e).__name__}: {e}")

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as ex:
        results = ex.map(run, todo)
        for task, result in zip(todo, results, strict=True):
            if result is None:
                continue
            if result.error:
                out.infra.append(task.id)
            elif not result.passed:
                out.failed.append(task.id)
            else:
                try:
                    demo = to_demonstration(result.messages, task, tokenize, iteration=iteration,
                                            untrained=result.untrained)
                except ApplianceError as e:  # the template's problem with this conversation, not the task's
                    out.unrendered[task.id] = e.message
                    continue
                out.added += store.add_demonstration(demo)
    return out


def pick_demonstrations(demos: list[Demonstration], frontier: dict[str, int], n: int, *,
                        seed: int | str = 0) -> list[Demonstration]:
    """Up to `n` demonstrations, without replacement, weighted toward each family's frontier level: weight 4
    at the frontier, 2 one level above (the hinted next step), 1 below (replay of what is mastered)."""
    if n <= 0 or not demos:
        return []
    if n >= len(demos):
        return list(demos)

    def weight(d: Demonstration) -> float:
        level = frontier.get(d.family, 1)
        return 4.0 if d.difficulty == level else 2.0 if d.difficulty == level + 1 else 1.0 if d.difficulty < level \
            else 0.5

    rng = random.Random(f"demos:{seed}")
    # weighted sampling without replacement (Efraimidis-Spirakis keys)
    keyed = sorted(demos, key=lambda d: rng.random() ** (1.0 / weight(d)), reverse=True)
    return keyed[:n]


def demonstration_samples(demos: Iterable[Demonstration]) -> list[Sample]:
    return [s for d in demos for s in d.to_samples()]


# --- the loop's use: a warm-start pool, per-iteration demonstrations, the mix for each LEARN phase -----
WARMSTART = "warmstart"  # spec.meta["pool"] of the tasks made only to be demonstrated (never practised)


CANDIDATES = 4  # tasks drawn per warm-start task kept: the pool picks the broadest of them


def spread_over_operations(specs: list[TaskSpec], n: int) -> list[TaskSpec]:
    """`n` of `specs` (in draw order), round-robin over their operations and, within one, new phrasings
    first: a family's few warm-start demonstrations show as many different requests as it has, rather
    than repeats of the operations a random draw happens to favour."""
    queues: dict[str, list[TaskSpec]] = {}
    for spec in specs:
        queues.setdefault(str(spec.meta.get("operation") or spec.meta.get("variant") or ""), []).append(spec)
    for op, group in queues.items():
        first_of_phrasing: dict[object, int] = {}
        for i, spec in enumerate(group):
            first_of_phrasing.setdefault(spec.meta.get("phrasing"), i)
        fresh = set(first_of_phrasing.values())
        queues[op] = [group[i] for i in sorted(fresh)] + [s for i, s in enumerate(group) if i not in fresh]
    picked: list[TaskSpec] = []
    while len(picked) < n and any(queues.values()):
        for group in queues.values():
            if group and len(picked) < n:
                picked.append(group.pop(0))
    return picked


def warmstart_tasks(settings: Settings, store: Store, run_id: str, families: list[str], *,
                    start: SandboxStarter | None = None) -> list[Task]:
    """The run's warm-start tasks (levels `training.demo_warmstart_levels`), synthesized and validated once."""
    from appliance.tasks.families import synthesize
    from appliance.tasks.validate import validate_many

    cfg = settings.training
    existing = [t for t in store.tasks(run_id, split=Split.TRAIN)
                if (t.spec.get("meta") or {}).get("pool") == WARMSTART]
    if not existing and cfg.demo_warmstart_tasks > 0:
        exclude = {t.spec["id"] for t in store.tasks(run_id)}
        for family in families:
            for level in cfg.demo_warmstart_levels:
                drawn = synthesize(family, level, CANDIDATES * cfg.demo_warmstart_tasks, seed=f"{run_id}:{WARMSTART}",
                                   exclude=exclude)
                for spec in spread_over_operations(drawn, cfg.demo_warmstart_tasks):
                    spec.meta["pool"] = WARMSTART
                    store.add_task(spec.task_row(run_id, Split.TRAIN))
        existing = [t for t in store.tasks(run_id, split=Split.TRAIN)
                    if (t.spec.get("meta") or {}).get("pool") == WARMSTART]
    pending = [t for t in existing if t.status == TaskStatus.PROPOSED]
    if pending:
        verdicts = validate_many(settings, [TaskSpec.of(t) for t in pending],
                                 parallel=min(2, settings.sandbox.max_concurrent), start=start)
        for task, v in zip(pending, verdicts, strict=True):
            for stage in v.stages:
                store.add_validation(task.id, stage.name, stage.ok, stage.detail or None)
            if not v.infra:
                store.set_task_status(task.id, TaskStatus.VALID if v.ok else TaskStatus.REJECTED, reason=v.reason)
    return store.tasks(run_id, split=Split.TRAIN)


def prepare_demonstrations(settings: Settings, store: Store, run_id: str, iteration: int, tokenize: ChatTokenizer,
                           families: list[str], *, start: SandboxStarter | None = None,
                           stopping: threading.Event | None = None) -> DemoYield:
    """The VALIDATE phase's part: demonstrations of every valid training task of the run that has none yet,
    and, before the first LEARN phase, of the warm-start pool. Idempotent (a crash redoes only what is missing)."""
    if not settings.training.demonstrations:
        return DemoYield()
    has_checkpoint = bool(store.checkpoints(run_id))
    tasks = warmstart_tasks(settings, store, run_id, families, start=start) if not has_checkpoint else store.tasks(
        run_id, split=Split.TRAIN)
    return demonstrate_tasks(settings, store, tasks, tokenize, iteration=iteration, start=start,
                             parallel=min(2, settings.sandbox.max_concurrent), stopping=stopping)


@dataclass
class DemoMix:
    """What a LEARN phase trains on from the demonstration pool, and with which settings."""

    samples: list[Sample]
    warmstart: bool
    settings: Settings

    def describe(self) -> str:
        what = "warm-start SFT on" if self.warmstart else "mixed in"
        return f"{what} {len(self.samples)} demonstrations"


def training_mix(settings: Settings, store: Store, run_id: str, iteration: int, frontier: dict[str, int],
                 rl_samples: int) -> DemoMix:
    """The first LEARN phase of a run (no checkpoint yet) trains on every demonstration of the warm-start
    levels, for `demo_warmstart_epochs`; later ones mix in max(demo_mix_min, demo_mix_ratio x RL samples)
    demonstrations, weighted toward each family's frontier (`pick_demonstrations`)."""
    cfg = settings.training
    if not cfg.demonstrations:
        return DemoMix([], False, settings)
    if not store.checkpoints(run_id):
        demos = store.demonstrations(run_id, levels=cfg.demo_warmstart_levels)
        warm = settings.model_copy(deep=True)
        warm.training.sft_epochs = cfg.demo_warmstart_epochs
        # hindsight demos are of practised tasks: keep them too
        demos += store.demonstrations(run_id, origin=HINDSIGHT)
        unique = list({d.digest: d for d in demos}.values())
        return DemoMix(demonstration_samples(unique), True, warm)
    n = max(cfg.demo_mix_min, int(round(cfg.demo_mix_ratio * rl_samples))) if cfg.demo_mix_ratio > 0 else 0
    # this iteration's own successes are trained from their exact tokens already: not again from the pool
    pool = [d for d in store.demonstrations(run_id) if not (d.origin == SUCCESS and d.iteration == iteration)]
    picked = pick_demonstrations(pool, frontier, n, seed=f"{run_id}:{iteration}")
    return DemoMix(demonstration_samples(picked), False, settings)
