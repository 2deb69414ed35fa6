"""Practice: one rollout = one task, one harness, one sandbox, one outcome; and groups of rollouts.

A rollout runs the task's workspace in a fresh hardened sandbox, lets a harness work on it (the built-in
agent on the host driving the sandbox's shell, or a third-party harness inside the sandbox behind the
model door), then hands the final workspace to the verifier, which runs in a new sandbox with the task's
protected files restored (`appliance.tasks.verify_workspace`). Every model call went through the proxy
under the rollout's own route, so the exact tokens are in the store; the samples are built from them.

Outcomes: the verifier decides success/failure; turn/token/context limits are `truncated`; anything the
machine caused (sandbox died, engine or proxy failed, verifier crashed, set-up failed) is `infra_error`
with its cause in `rollouts.error` as "infra: <cause>", and never reaches the loss. Classified by cause:
a third-party harness that exits non-zero crashed (before or after its model calls: either way the
episode is not the policy's), and a rollout with a model call the engine failed (unreachable, 5xx, a
broken stream; `engine_failed`) is infra_error even when the harness carried on. A request the engine
refused as the request's fault (4xx: too long a context) stays the agent's.

The rollout is finished and its samples written in one transaction, so a crash cannot leave a finished
rollout without its samples.
"""

from __future__ import annotations

import re
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from appliance.config import Settings
from appliance.errors import ApplianceError, Interrupted, SandboxNotClean, SandboxStorageFull, TrajectoryError
from appliance.harness.base import ClientConfig, EndReason, Episode, Limits, says_context_overflow
from appliance.harness.builtin import request_of, run_builtin
from appliance.harness.external import harness_image, harness_settings, run_external
from appliance.proxy import register_route
from appliance.sandbox import ModelDoor, SandboxPool
from appliance.schemas import FailureMode, ModelCall, Outcome, Rollout, RolloutStatus, Sample
from appliance.store import Store
from appliance.tasks import TaskSpec, verify_workspace
from appliance.tasks.harbor import task_image
from appliance.tasks.validate import write_workspace
from appliance.trajectories import TrajectoryReport, build_samples

BUILTIN = "builtin"
TRUNCATING = {EndReason.TURN_LIMIT: FailureMode.TURN_LIMIT, EndReason.TOKEN_LIMIT: FailureMode.TOKEN_LIMIT,
              EndReason.CONTEXT_OVERFLOW: FailureMode.CONTEXT_OVERFLOW, EndReason.TIME_LIMIT: FailureMode.TIMEOUT,
              EndReason.REPEATING: FailureMode.REPEATING}


@dataclass
class Practice:
    """What a rollout needs from the running appliance: settings, store, the proxy, a sandbox pool."""

    settings: Settings
    store: Store
    proxy_host: str
    proxy_port: int
    pool: SandboxPool
    log: Callable[[str], None] = print
    client_transport: Any = None  # an httpx transport for the built-in harness; tests hand in a scripted one
    # Set when the appliance shuts down: failures from then on are the shutdown's, not the machine's.
    stopping: threading.Event = field(default_factory=threading.Event)
    _images: dict[str, str] = field(default_factory=dict)

    @property
    def proxy_url(self) -> str:
        return f"http://{self.proxy_host}:{self.proxy_port}"

    def image_for(self, harness: str) -> str | None:
        if harness == BUILTIN:
            return None
        if harness not in self._images:
            self._images[harness] = harness_image(self.settings, harness, self.log)
        return self._images[harness]


@dataclass(slots=True)
class RolloutResult:
    rollout: Rollout
    episode: dict[str, Any] | None
    verifier_output: str
    trajectory: TrajectoryReport | None
    tampered: list[str]


def new_rollout(store: Store, *, harness: str, policy_version: int, run_id: str | None = None,
                task_id: str | None = None, group_id: str | None = None, iteration: int | None = None,
                purpose: str = "train", rollout_id: str | None = None) -> Rollout:
    """Create (idempotently, when the caller supplies the id) a pending rollout row."""
    rollout = Rollout(rollout_id or f"ro-{uuid.uuid4().hex[:16]}", run_id, task_id, group_id, iteration, harness,
                      policy_version, RolloutStatus.PENDING, purpose)
    store.add_rollout(rollout)
    return store.get_rollout(rollout.id)


def run_rollout(practice: Practice, spec: TaskSpec, rollout: Rollout) -> RolloutResult:
    """Run a pending rollout to its outcome; the row is finished on every path, also on infra errors,
    except a shutdown's: then the row goes back to pending and `Interrupted` is raised."""
    settings, store = practice.settings, practice.store
    if practice.stopping.is_set():
        raise Interrupted(f"rollout {rollout.id} not started: the appliance is stopping")
    store.start_rollout(rollout.id)
    token = register_route(store, rollout.id)
    workspace = settings.home / "workspaces" / rollout.id
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    episode: Episode | None = None
    verifier_output, tampered, turns = "", [], 0
    reason: str | None
    outcome, reward, reason = Outcome.INFRA_ERROR, 0.0, FailureMode.INFRA.reason("rollout did not finish")
    try:
        write_workspace(spec, workspace)
        image = practice.image_for(rollout.harness)
        door = ModelDoor(practice.proxy_host, practice.proxy_port) if image else None
        own = task_image(spec).get("image")  # a task with its own environment (tasks.environment)
        if own and image:
            raise _Infra(f"task {spec.id} has its own environment; harness {rollout.harness!r} brings another "
                         "image: such tasks run with the built-in harness for now")
        memory = harness_settings(settings, rollout.harness).memory if image else None  # its own program's
        with practice.pool.start(workspace=workspace, image=image or own, door=door, memory=memory,
                                 labels={"appliance.rollout": rollout.id}) as sb:
            if spec.setup.strip():
                setup = sb.exec(spec.setup, timeout=spec.limits.setup_timeout_s)
                if setup.exit_code != 0:
                    raise _Infra(f"task set-up failed ({setup.exit_code}): {setup.stderr.strip()[-300:]}")
            answer = ""
            if image is None:
                episode = _run_builtin(practice, spec, sb.shell(), token, evaluating=rollout.purpose == "eval")
                turns, answer = episode.turns, episode.answer
            else:
                spec_h = harness_settings(settings, rollout.harness)
                ext = run_external(sb, spec_h, instruction=spec.instruction, token=token,
                                   max_turns=min(settings.harness.max_turns, spec.limits.max_turns),
                                   command_timeout_s=min(settings.harness.command_timeout_s,
                                                         spec.limits.command_timeout_s))
                calls = store.model_calls(rollout.id)
                turns = len([c for c in calls if c.status == "ok"])
                episode = external_episode(ext.exit_code, ext.timed_out, turns, ext.stderr,
                                           [c for c in calls if c.status not in ("side", "count")])
                answer = ext.answer
        if episode.infra_error:
            raise _Infra(f"{episode.end_reason}: {episode.error or ''}".strip())
        failed = [c for c in store.model_calls(rollout.id) if engine_failed(c)]
        if failed:
            raise _Infra(f"the engine failed {len(failed)} model call(s): {(failed[0].error or '')[:300]}")
        # sb.dropped: what the agent left that cannot leave its sandbox (FIFOs, sockets, links out): tampering
        verdict = verify_workspace(settings, spec, workspace, start=practice.pool.start, dropped=sb.dropped,
                                   archive=sb.copied_out, answer=answer)
        verifier_output, tampered = verdict.output, list(verdict.tampered)
        if verdict.error:
            raise _Infra(f"verifier: {verdict.error}")
        if verdict.passed:
            outcome, reward, reason = Outcome.SUCCESS, 1.0, None
        elif episode.end_reason in TRUNCATING:
            outcome, reason = Outcome.TRUNCATED, TRUNCATING[episode.end_reason].reason(f"after {turns} turns")
        else:
            mode = (FailureMode.FORMAT_ERROR if episode.commands == 0 and episode.parse_errors > 0
                    else FailureMode.WRONG_ANSWER)
            if verdict.timed_out:  # validation showed the verifier finishes; what the agent left made it hang
                mode = FailureMode.VERIFIER_TIMEOUT
            outcome, reason = Outcome.FAILURE, mode.reason("verifier failed")
        if not verdict.passed and verdict.score:  # partial credit, capped below a pass (tasks.verify)
            reward = float(verdict.score)
        if tampered:
            reason = f"{reason or 'success'}; tampered with {', '.join(tampered)}"
    except _Infra as e:
        reason = FailureMode.INFRA.reason(str(e))
    except SandboxStorageFull:  # no rollout can run until space is freed: no outcome, the phase fails
        store.requeue_rollout(rollout.id)
        raise
    except SandboxNotClean as e:  # processes the agent left would not die: its failure, not the machine's
        outcome, reward = Outcome.FAILURE, 0.0
        reason = FailureMode.WRONG_ANSWER.reason(f"what it left running outlived the episode: {e.message}"[:400])
        tampered.append("processes that would not die")
    except ApplianceError as e:  # sandbox, engine or set-up failures are the machine's, not the policy's
        # with the hint: when every rollout fails this way, the run's failure event quotes it as the fix
        reason = FailureMode.INFRA.reason(f"{type(e).__name__}: {e.message}" + (f" ({e.hint})" if e.hint else ""))
    except Exception as e:  # noqa: BLE001
        if episode is None:
            raise
        # After the episode only the workspace the agent left is being handled (copy-out, unpack, archive,
        # verifier): whatever it provokes there is the agent's failure, never a crash of the phase.
        outcome, reward = Outcome.FAILURE, 0.0
        reason = FailureMode.WRONG_ANSWER.reason(
            f"the workspace it left could not be judged: {type(e).__name__}: {e}"[:400])
        tampered.append(f"workspace ({type(e).__name__})")
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    if outcome == Outcome.INFRA_ERROR and practice.stopping.is_set():
        # the engine was stopped or the sandbox swept under it: no outcome; the next start redoes it
        store.requeue_rollout(rollout.id)
        raise Interrupted(f"rollout {rollout.id} interrupted by the shutdown ({reason})")
    samples: list[Sample] = []
    trajectory: TrajectoryReport | None = None
    if outcome != Outcome.INFRA_ERROR:
        try:
            samples, trajectory = build_samples(store.model_calls(rollout.id), rollout_id=rollout.id,
                                                group_id=rollout.group_id)
        except TrajectoryError as e:  # the recorded calls do not fit together: nothing trustworthy to train
            outcome, reward, reason = Outcome.INFRA_ERROR, 0.0, FailureMode.INFRA.reason(f"trajectory: {e.message}")
    store.finish_rollout(rollout.id, outcome, reward, error=reason, turns=turns, samples=samples)
    return RolloutResult(store.get_rollout(rollout.id), episode.as_dict() if episode else None, verifier_output,
                         trajectory, tampered)


class _Infra(Exception):
    """A failure the machine caused; recorded as infra_error with this message as the cause."""


def external_episode(exit_code: int, timed_out: bool, turns: int, stderr: str,
                     calls: Sequence[ModelCall] = ()) -> Episode:
    """How a third-party harness's run ended; raises _Infra when the harness itself failed."""
    if timed_out:
        return Episode(EndReason.TIME_LIMIT, turns, [])
    if exit_code != 0 and calls and context_refused(calls[-1]):
        if turns > 0:  # its own turns filled the context: the agent's overflow, truncated as the built-in's is
            return Episode(EndReason.CONTEXT_OVERFLOW, turns, [])
        raise _Infra("the harness's first prompt is longer than the engine's context: "
                     f"{(calls[-1].error or '')[:200]}; raise engine.max_model_len (and its [harnesses.NAME] "
                     "context_tokens)")
    if exit_code != 0 and calls and length_stopped(calls[-1]):
        # its last answer was cut at max_tokens and the harness gave up on it (Codex exits 1): the policy's
        # rambling, truncated as the built-in harness's token limit is
        return Episode(EndReason.TOKEN_LIMIT, turns, [])
    if exit_code != 0:  # a crashed harness, before or after its model calls: not the policy's doing
        raise _Infra(f"harness exited {exit_code} after {turns} model call(s): {stderr.strip()[-300:]}")
    return Episode(EndReason.SUBMITTED, turns, [])


_ENGINE_STATUS = re.compile(r"engine answered (\d+)")


def context_refused(call: ModelCall) -> bool:
    """The engine refused this call because prompt and max_tokens do not fit its context (vLLM's 400)."""
    status = _ENGINE_STATUS.match(call.error or "")
    return status is not None and status.group(1) == "400" and says_context_overflow(call.error or "")


def length_stopped(call: ModelCall) -> bool:
    """The engine's answer to this call was cut at max_tokens, in whichever dialect it was recorded."""
    r = call.response if call.status == "ok" and isinstance(call.response, dict) else {}
    choices = r.get("choices") or [{}]
    reason = (r.get("incomplete_details") or {}).get("reason") if r.get("status") == "incomplete" else None
    return (choices[0] or {}).get("finish_reason") == "length" or r.get("stop_reason") == "max_tokens" or \
        reason == "max_output_tokens"


def engine_failed(call: ModelCall) -> bool:
    """The proxy recorded this call as failed by the engine (not refused as the request's fault)."""
    if call.status == "ok" or not call.error:
        return False
    if call.error.startswith(("engine unreachable", "engine failed mid-stream", "engine aborted")):
        return True
    status = _ENGINE_STATUS.match(call.error)
    return status is not None and int(status.group(1)) >= 500


def _run_builtin(practice: Practice, spec: TaskSpec, shell: Any, token: str, *, evaluating: bool = False) -> Episode:
    h = practice.settings.harness
    client = ClientConfig.from_settings(h, f"{practice.proxy_url}/r/{token}/v1", token)
    client.transport = practice.client_transport
    if evaluating and practice.settings.evaluation.temperature is not None:
        client.temperature = practice.settings.evaluation.temperature
    limits = Limits.from_settings(h)
    limits.max_turns = min(limits.max_turns, spec.limits.max_turns)
    limits.command_timeout_s = min(limits.command_timeout_s, spec.limits.command_timeout_s)
    return run_builtin(request_of(spec.instruction, spec.answer), shell, client, limits)


def run_rollouts(practice: Practice, work: list[tuple[TaskSpec, Rollout]], *,
                 slot: Callable[[str], AbstractContextManager[None]] | None = None) -> list[RolloutResult]:
    """Run many pending rollouts concurrently (the sandbox pool caps how many are alive at once). `slot(id)`,
    when given, is entered before each rollout starts and left when it ends: the loop's safe point (it may
    hold the start while the run is paused, or raise Interrupted to start no more) and its count in flight."""
    if not work:
        return []

    def one(w: tuple[TaskSpec, Rollout]) -> RolloutResult:
        if slot is None:
            return run_rollout(practice, *w)
        with slot(w[1].id):
            return run_rollout(practice, *w)

    with ThreadPoolExecutor(max_workers=practice.pool.max_concurrent) as ex:
        return list(ex.map(one, work))
