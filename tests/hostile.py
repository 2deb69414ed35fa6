"""A store seeded with hostile text wherever an agent or a task author can put text: the CLI and TUI
tests open every view on it (terminal escapes must stay inert, bracket text must not be read as markup)."""

from __future__ import annotations

import re

from appliance.schemas import (
    CapabilityReport,
    ControlCommand,
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

# a clipboard write (OSC 52), a window title (OSC 0), a hyperlink (OSC 8), a screen clear, BEL, a C1 CSI,
# a bidi override, and bracket text that Rich's escape() lets through and Textual's markup trips on
ESCAPES = ("\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"
           "\x1b[2J\x1b[H\x07\x9b31m\u202egnp.exe")
BRACKETS = "[1 a=b:c] [/] [bold]x[/bold] [link=http://evil.example/]y[/link] [@click=app.quit]z[/]"
HOSTILE = f"{ESCAPES} {BRACKETS}"
FILE_NAME = "notes\x1b]0;title\x07[1 a=b:c].txt"

# token ids for the hostile decoder: what an agent's command printed (its observation) comes back as text
VOCAB = ["<s>", "user", "\n", " ls", "```", HOSTILE, " done"]
RUN, TASK, ROLLOUT = "hostile", "files-1-0", "r-hostile-0"


def hostile_decoder(ids: list[int]) -> list[str]:
    return [VOCAB[i] if 0 <= i < len(VOCAB) else f"<{i}>" for i in ids]


def seed_hostile(store: Store) -> None:
    store.create_run(RUN, {"profile": "cpu"})
    store.set_engine_state(EngineState.STARTING, force=True)
    store.set_engine_state(EngineState.SERVING, policy_version=0)
    store.start_iteration(RUN, 0, policy_version=0)
    store.set_iteration_status(RUN, 0, IterationStatus.DONE)
    store.save_report(RUN, 0, CapabilityReport(iteration=0), "# Report\n\nnothing yet\n")
    store.start_iteration(RUN, 1, policy_version=0)
    store.set_iteration_phase(RUN, 1, Phase.PRACTISE)
    store.add_event(Event("phase", str(Phase.PRACTISE), RUN, {"iteration": 1}))
    store.add_event(Event("error", f"verifier crashed: {HOSTILE}", RUN, {"iteration": 1}))
    store.set_iteration_status(RUN, 1, IterationStatus.FAILED, error=f"practise failed: {HOSTILE}")
    spec = {"id": TASK, "family": "files", "difficulty": 1, "instruction": f"Do this: {HOSTILE}",
            "files": {FILE_NAME: HOSTILE}, "setup": f"printf '{HOSTILE}'", "verify": f"echo '{HOSTILE}'",
            "solution": f"echo '{HOSTILE}'", "meta": {"note": HOSTILE}}
    for k, (status, reason) in enumerate([(TaskStatus.REJECTED, f"setup printed {HOSTILE}"),
                                          (TaskStatus.LEARNABLE, None)]):
        tid = TASK if k == 0 else f"files-1-{k}"
        store.add_task(Task(tid, RUN, "files", 1, "self_proposed", Split.TRAIN, status, {**spec, "id": tid},
                            reason, 0.5 if reason is None else None))
    store.add_rollouts([Rollout(ROLLOUT, RUN, TASK, "g-hostile", 1, "bash-agent", 0, RolloutStatus.FINISHED,
                                "train", Outcome.FAILURE, 0.0, f"wrong_answer: {HOSTILE}", 2)])
    prompt, reply, observation = [0, 1, 5, 2], [4, 3, 4], [2, 5, 2]
    store.add_model_calls([
        ModelCall(None, ROLLOUT, 0, "ok", {"messages": [{"role": "user", "content": HOSTILE}]},
                  {"choices": [{"message": {"content": HOSTILE}}]}, prompt, reply, [-0.1] * 3, 0, 0.1),
        ModelCall(None, ROLLOUT, 1, "error", {"messages": []}, None, [], [], [], 0, 0.2,
                  error=f"engine answered 400: {HOSTILE}")])
    seq = prompt + reply + observation + [6]
    store.add_samples([Sample(ROLLOUT, "g-hostile", 0, seq, [0] * 4 + [1] * 3 + [0] * 3 + [1], [0.0] * len(seq),
                              0, 0.0)])
    store.save_report(RUN, 1, CapabilityReport(iteration=1), f"# Report\n\n{HOSTILE}\n\n- analysis: {BRACKETS}\n")
    control = store.request_control(RUN, ControlCommand.PAUSE)
    store.ack_control(control.id, f"refused: {HOSTILE}")


SGR = re.compile(r"\x1b\[[0-9;]*m")  # colour and weight: the only sequences the CLI itself writes


def raw_controls(output: str) -> list[str]:
    """Control characters in terminal output other than newline, tab and the CLI's own SGR styling (a pty
    turns each newline into CR LF)."""
    return [hex(ord(c)) for c in SGR.sub("", output).replace("\r\n", "\n")
            if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0 or c in "\u202a\u202b\u202c\u202d\u202e"]
