"""Third-party harnesses, run unmodified inside the sandbox and pointed at the proxy.

A harness is configured (`[harnesses.NAME]` in appliance.toml) as a recipe folder, a command line and an
environment. A Python recipe (Containerfile, requirements.txt, package.txt) has its packages installed on
the host with `pip --target` (the host and the sandbox image share the CPython minor version); an npm
recipe (Containerfile, npm.txt: `package@version` lines) has its packages installed on the host with
`npm install --ignore-scripts` (no package code runs on the host; the harnesses here ship their program
as a platform package of the registry, which the Containerfile copies). Either way the layer is copied
into an image derived from the sandbox image, so neither the image build nor the sandbox needs network.
Inside the sandbox the harness sees ordinary OpenAI / Anthropic base URLs on 127.0.0.1 (the model door);
the per-rollout secret token is part of the URL and doubles as the API key.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.config import ExternalHarnessSettings, Settings
from appliance.errors import ConfigError, SetupError
from appliance.sandbox import DOOR_PORT, Sandbox, build_image, image_exists, podman_env

IMAGES_DIR = Path(__file__).parent / "images"
PIP_FILES = ("Containerfile", "requirements.txt", "package.txt")
NPM_FILES = ("Containerfile", "npm.txt")


@dataclass(slots=True)
class ExternalRun:
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool
    answer: str = ""  # the final answer it left where `answer` says (a question task's answer)


def harness_settings(settings: Settings, name: str) -> ExternalHarnessSettings:
    try:
        return settings.harnesses[name]
    except KeyError:
        choices = ", ".join(["builtin", *settings.harnesses]) or "builtin"
        raise ConfigError(f"unknown harness {name!r}",
                          f"choose one of: {choices} (or add [harnesses.{name}])") from None


def fit_context(settings: Settings, name: str, log: Callable[[str], None] = print) -> Settings:
    """Settings whose engine serves the context harness `name` declares it needs (`context_tokens`): raised
    for this command where the model's own context allows it; refused before anything starts where it does not.
    A harness's first prompt is its system prompt and tool schemas: several thousand tokens before any turn."""
    need, served = harness_settings(settings, name).context_tokens, settings.engine.max_model_len
    if need <= served:
        return settings
    own = model_context(settings.model_path)
    if own is not None and need > own:
        raise ConfigError(
            f"harness {name} needs a served context of {need} tokens ([harnesses.{name}] context_tokens: its first "
            f"prompt, the proxy's max_tokens and room for a few turns); engine.max_model_len is {served} and the "
            f"model's own context is {own}",
            f"serve a model with a longer context (engine.model), or offer the harness fewer tools in "
            f"[harnesses.{name}] command and lower its context_tokens to what its first prompt then needs")
    log(f"serving {need} tokens of context for harness {name} (engine.max_model_len is {served})")
    return settings.model_copy(update={"engine": settings.engine.model_copy(update={"max_model_len": need})})


def model_context(folder: Path) -> int | None:
    """The context the model was trained for (config.json's max_position_embeddings), or None if unknown."""
    try:
        value = json.loads((folder / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, int) else None


def recipe_dir(spec: ExternalHarnessSettings) -> Path:
    path = Path(spec.recipe)
    path = path if path.is_absolute() else IMAGES_DIR / path
    files = recipe_files(path)
    missing = [f for f in files if not (path / f).exists()]
    if missing:
        raise ConfigError(f"harness recipe {path} lacks {', '.join(missing)}",
                          f"a recipe folder holds {', '.join(PIP_FILES)} (Python) or {', '.join(NPM_FILES)} (npm)")
    return path


def recipe_files(path: Path) -> tuple[str, ...]:
    return NPM_FILES if (path / "npm.txt").exists() else PIP_FILES


def harness_image(settings: Settings, name: str, log: Callable[[str], None] = print) -> str:
    """Build (once per recipe and base image) the derived image of harness `name`; return its reference."""
    spec = harness_settings(settings, name)
    recipe = recipe_dir(spec)
    base = build_image(settings, log)
    h = hashlib.sha256(base.encode())
    for f in recipe_files(recipe):
        h.update((recipe / f).read_bytes())
    key = h.hexdigest()[:12]
    ref = f"appliance-harness-{name}:{key}"
    if image_exists(settings, ref):
        return ref
    layer = settings.home / "harness-layers" / f"{name}-{key}"
    site = layer / "site"
    if not (layer / ".installed").exists():
        shutil.rmtree(layer, ignore_errors=True)
        site.mkdir(parents=True)
        log(f"installing {name} into {site}")
        if recipe_files(recipe) == NPM_FILES:
            install_npm(name, recipe / "npm.txt", site)
        else:
            install_pip(settings, name, recipe, site)
        (layer / ".installed").write_text(key)
    shutil.copy(recipe / "Containerfile", layer / "Containerfile")
    log(f"building {ref} on {base}")
    proc = subprocess.run(["podman", "build", "--pull=never", "--network=none", "--build-arg", f"BASE={base}",
                           "-t", ref, str(layer)], env=podman_env(settings), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SetupError(f"podman build of {ref} failed: {proc.stderr.strip()[-1500:]}",
                         "`appliance doctor` checks podman; fix it and run again")
    return ref


def install_pip(settings: Settings, name: str, recipe: Path, site: Path) -> None:
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target", str(site)]
    if settings.harness.wheelhouse is not None:  # the container's wheels: first start needs no network
        pip += ["--no-index", "--find-links", str(settings.harness.wheelhouse)]
    for args in (["-r", str(recipe / "requirements.txt")], ["--no-deps", "-r", str(recipe / "package.txt")]):
        proc = subprocess.run(pip + args, capture_output=True, text=True)
        if proc.returncode != 0:
            where = (f"that {settings.harness.wheelhouse} holds its wheels" if settings.harness.wheelhouse
                     else "that PyPI is reachable")
            raise SetupError(f"pip could not install harness {name}: {proc.stderr.strip()[-1500:]}",
                             f"check {recipe}/requirements.txt and {where}")


def install_npm(name: str, listing: Path, site: Path) -> None:
    """`npm install` of the listed packages into `site`, on the host. --ignore-scripts: a package's install
    script would run its code here, and one that downloads its program from outside the registry could
    not work offline anyway; the program comes from the platform package the registry holds."""
    packages = [line.split("#")[0].strip() for line in listing.read_text().splitlines()]
    packages = [p for p in packages if p]
    npm = shutil.which("npm")
    if npm is None:
        raise SetupError(f"npm is needed on this machine to install harness {name}",
                         "install it (Debian: apt-get install npm) and run `appliance init` again")
    proc = subprocess.run([npm, "install", "--prefix", str(site), "--ignore-scripts", "--no-audit", "--no-fund",
                           "--omit=dev", "--no-save", *packages], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SetupError(f"npm could not install harness {name}: {proc.stderr.strip()[-1500:]}",
                         f"check {listing} and that the npm registry is reachable (npm config get registry)")


def door_urls(token: str) -> dict[str, str]:
    """The URLs a harness inside the sandbox uses; the token selects this rollout's route."""
    root = f"http://127.0.0.1:{DOOR_PORT}/r/{token}"
    return {"anthropic_base_url": root, "openai_base_url": f"{root}/v1", "base_url": f"{root}/v1"}


def run_external(sandbox: Sandbox, spec: ExternalHarnessSettings, *, instruction: str, token: str,
                 model: str = "policy", max_turns: int = 10, command_timeout_s: float = 60.0) -> ExternalRun:
    """Run the harness's command line once in /workspace; the sandbox was started with the model door."""
    values = {**door_urls(token), "api_key": token, "model": model, "instruction": instruction,
              "max_turns": str(max_turns), "command_timeout_s": str(max(1, math.ceil(command_timeout_s)))}
    try:
        argv = [part.format(**values) for part in spec.command]
        env = {k: v.format(**values) for k, v in spec.env.items()}
    except (KeyError, IndexError) as e:
        raise ConfigError(f"harness command uses an unknown placeholder {e}",
                          "placeholders: " + ", ".join("{" + k + "}" for k in values)) from None
    t0 = time.monotonic()
    r = sandbox.exec(argv, timeout=spec.timeout_s, env=env)
    return ExternalRun(r.exit_code, r.stdout, r.stderr, time.monotonic() - t0, r.timed_out,
                       read_answer(sandbox, spec.answer) if spec.answer else "")


def read_answer(sandbox: Sandbox, where: str) -> str:
    """The harness's final answer from inside the sandbox (`PATH` or `PATH:dotted.key` of a JSON file);
    empty when it left none. What the harness wrote is untrusted text: it only ever reaches a verifier."""
    path, _, key = where.partition(":")
    r = sandbox.exec(["cat", "--", path], timeout=30)
    if r.exit_code != 0:
        return ""
    if not key:
        return r.stdout.strip()
    try:
        value: Any = json.loads(r.stdout)
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    except ValueError:
        return ""
    return value.strip() if isinstance(value, str) else ""
