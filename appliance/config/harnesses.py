"""The third-party harnesses of the settings tree (`[harnesses.NAME]`): each one's recipe, command line,
environment, where its answer lies, and what it needs from the machine (the served context its first prompt
takes, the sandbox memory its program takes); `appliance.harness.external` reads them."""

from __future__ import annotations

from pydantic import Field

from appliance.config.section import Section


class ExternalHarnessSettings(Section):
    recipe: str = Field(description="Recipe folder (Containerfile, requirements.txt, package.txt): a name under "
                        "appliance/harness/images or an absolute path.")
    command: list[str] = Field(description="Command line run in /workspace. Placeholders: {instruction}, "
                               "{openai_base_url}, {anthropic_base_url}, {base_url}, {api_key}, {model}, {max_turns}, "
                               "{command_timeout_s} (whole seconds: the task's limit of one command, capped by "
                               "harness.command_timeout_s).")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment (same placeholders).")
    timeout_s: float = Field(900.0, gt=0, description="Wall time of one episode of this harness.")
    at_init: bool = Field(True, description="Build this harness's image at `appliance init`; off: at its first "
                          "rollout (a harness most runs never use, or one whose packages the machine cannot fetch at "
                          "init, such as npm ones inside the product container, which has no npm).")
    answer: str = Field("", description="Where the harness leaves the final answer it submits with (a question "
                        "task's answer): `PATH:dotted.key` of a JSON file inside the sandbox, `PATH` of a text file, "
                        "or empty when it leaves none.")
    context_tokens: int = Field(
        0, ge=0, description="Smallest engine.max_model_len this harness works in: its first prompt (system prompt and "
        "tool schemas, in the served model's tokens), the proxy's max_tokens and room for a few turns. A rollout of "
        "it is refused before it starts where the engine serves less (`appliance rollout` serves this much when the "
        "model's own context allows). 0 = no claim.")
    memory: str | None = Field(
        None, description="Sandbox memory this harness needs (podman notation, e.g. 1g), where it is more than "
        "sandbox.memory: OpenCode's program alone is ~500 MB resident. None = sandbox.memory.")


def default_harnesses() -> dict[str, ExternalHarnessSettings]:
    return {
        "mini-swe-agent": ExternalHarnessSettings(
            recipe="mini-swe-agent",
            command=["python3", "-m", "minisweagent.run.mini", "-c", "mini_textbased.yaml",
                     "-c", "model.model_kwargs.api_base={openai_base_url}",
                     "-c", "model.model_kwargs.api_key={api_key}", "-c", "agent.step_limit={max_turns}",
                     "-c", "environment.cwd=/workspace", "-c", "environment.timeout={command_timeout_s}",
                     "-m", "openai/{model}", "--model-class", "litellm_textbased", "-l", "0",
                     "-t", "{instruction}", "--yolo", "--exit-immediately", "-o", "/tmp/trajectory.json"],
            env={"OPENAI_API_KEY": "{api_key}", "OPENAI_BASE_URL": "{openai_base_url}"},
            # what follows its submit command's first output line
            answer="/tmp/trajectory.json:info.submission",
        ),
        # OpenCode (npm opencode-ai): chat completions with tools through its openai-compatible provider; its
        # side agents (title; summary; compaction, which it runs when a prompt outgrows the context) name the
        # model `side` (proxy.side_models). `opencode run` prints the final answer alone on stdout (logs go to
        # stderr), kept in a file for question tasks. Its sub-agent, todo, web-fetch and skill tools are off: the
        # sandbox has no network and no skills, and their schemas alone were 2.3k tokens of an 8k context.
        "opencode": ExternalHarnessSettings(
            recipe="opencode",
            command=["bash", "-o", "pipefail", "-c",
                     '/opt/harness/bin/opencode run "$1" | tee /tmp/opencode-answer.txt', "opencode", "{instruction}"],
            env={"OPENCODE_CONFIG_CONTENT": (
                '{{"provider": {{"door": {{"npm": "@ai-sdk/openai-compatible", "name": "door", "options": '
                '{{"baseURL": "{openai_base_url}", "apiKey": "{api_key}"}}, "models": {{"{model}": {{"name": '
                '"{model}", "tool_call": true}}, "side": {{"name": "side"}}}}}}}}, "model": "door/{model}", '
                '"small_model": "door/side", "autoupdate": false, "share": "disabled", '
                '"agent": {{"build": {{"steps": {max_turns}}}, "compaction": {{"model": "door/side"}}, '
                '"summary": {{"model": "door/side"}}, "title": {{"model": "door/side"}}}}, '
                '"tools": {{"task": false, "todowrite": false, "webfetch": false, "skill": false}}}}'),
                 "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
                 "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
                 "OPENCODE_DISABLE_SHARE": "1", "OPENCODE_DISABLE_CLAUDE_CODE": "1",
                 "OPENCODE_EXPERIMENTAL_BASH_DEFAULT_TIMEOUT_MS": "{command_timeout_s}000"},
            answer="/tmp/opencode-answer.txt",
            # first prompt 5290 tokens of the bundled model with those four tools off (7571 with them)
            context_tokens=8192, memory="1g",
            at_init=False,  # ~185 MB from npm, and the product container has no npm: built at its first rollout
        ),
        # Claude Code (npm @anthropic-ai/claude-code): Anthropic Messages with tool_use blocks, streamed; its
        # small ("haiku") model is named `side`. `claude -p` prints the final answer alone on stdout. `--tools`
        # offers its shell and file tools only: its default set (sub-agents, workflows, schedules) was 8k tokens.
        "claude-code": ExternalHarnessSettings(
            recipe="claude-code",
            command=["bash", "-o", "pipefail", "-c", '/opt/harness/bin/claude -p "$1" --max-turns "$2" '
                     '--tools Bash,Read,Edit,Write --dangerously-skip-permissions --output-format text '
                     '| tee /tmp/claude-answer.txt', "claude",
                     "{instruction}", "{max_turns}"],
            env={"ANTHROPIC_BASE_URL": "{anthropic_base_url}", "ANTHROPIC_API_KEY": "{api_key}",
                 "ANTHROPIC_MODEL": "{model}", "ANTHROPIC_DEFAULT_HAIKU_MODEL": "side",
                 "ANTHROPIC_SMALL_FAST_MODEL": "side", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                 "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
                 "BASH_DEFAULT_TIMEOUT_MS": "{command_timeout_s}000", "BASH_MAX_TIMEOUT_MS": "{command_timeout_s}000"},
            answer="/tmp/claude-answer.txt",
            # first prompt 2568 tokens with its four file and shell tools (10666 with its default set)
            context_tokens=8192,
            at_init=False,  # ~430 MB from npm, and the product container has no npm: built at its first rollout
        ),
        # Codex CLI (npm @openai/codex): the OpenAI Responses API, streamed, with function tools (exec_command;
        # it edits files with apply_patch through it). `codex exec -o FILE` writes its last message there. Its
        # sub-agent and goal tools are off (3.3k tokens of schemas).
        "codex": ExternalHarnessSettings(
            recipe="codex",
            command=["/opt/harness/bin/codex", "exec", "--skip-git-repo-check",
                     # the sandbox is the isolation: Codex's own (Landlock, seccomp) cannot nest inside it
                     "--dangerously-bypass-approvals-and-sandbox", "-c", "model_provider=door",
                     "-c", 'model_providers.door={{name="door",base_url="{openai_base_url}",env_key="DOOR_API_KEY",'
                     'wire_api="responses"}}', "-c", "check_for_update_on_startup=false",
                     "-c", "analytics.enabled=false", "--disable", "multi_agent", "--disable", "goals",
                     "-m", "{model}", "-o", "/tmp/codex-answer.txt", "{instruction}"],
            env={"DOOR_API_KEY": "{api_key}"},
            answer="/tmp/codex-answer.txt",
            # first prompt 5711 tokens without its sub-agent and goal tools (8993 with them)
            context_tokens=8192,
            at_init=False,  # ~320 MB from npm, and the product container has no npm: built at its first rollout
        ),
    }
