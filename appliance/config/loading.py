"""Reading the settings tree: the TOML file merged over a profile's defaults, the environment over both,
and every mistake turned into a `ConfigError` that names the key, the value and the valid keys; and the
reference of every key that `appliance config` prints."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from appliance.config.settings import DEFAULT_HOME, PROFILE_DEFAULTS, Settings
from appliance.errors import ConfigError


def config_file_path(config_file: Path | str | None = None, environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    if config_file:
        return Path(config_file).expanduser()
    if environ.get("APPLIANCE_CONFIG"):
        return Path(environ["APPLIANCE_CONFIG"]).expanduser()
    return Path(environ.get("APPLIANCE_HOME") or DEFAULT_HOME).expanduser() / "appliance.toml"


def load_settings(config_file: Path | str | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Read the settings tree; raise `ConfigError` naming the key and value on any mistake."""
    environ = dict(os.environ if environ is None else environ)
    environ.pop("APPLIANCE_CONFIG", None)  # selects the file; not a setting
    path = config_file_path(config_file, environ)
    file_data: dict[str, Any] = {}
    if config_file and not path.exists():
        raise ConfigError(f"config file {path} does not exist", "pass an existing file to --config, or omit it")
    if path.exists():
        try:
            file_data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path} is not valid TOML: {e}", "fix the syntax on the line named above") from e
    profile = environ.get("APPLIANCE_PROFILE") or file_data.get("profile") or "cpu"
    if profile not in PROFILE_DEFAULTS:
        raise ConfigError(
            f"unknown profile {profile!r}", f"set profile to one of: {', '.join(PROFILE_DEFAULTS)}"
        )
    merged = _deep_merge(PROFILE_DEFAULTS[profile], file_data)
    saved = {k: v for k, v in os.environ.items() if k.startswith("APPLIANCE_")}
    try:
        # pydantic-settings reads os.environ; swap in the caller's environment for the duration.
        for k in saved:
            del os.environ[k]
        os.environ.update({k: v for k, v in environ.items() if k.startswith("APPLIANCE_")})
        return Settings(**merged)
    except ValidationError as e:
        raise _config_error(e, path) from None
    finally:
        for k in [k for k in os.environ if k.startswith("APPLIANCE_")]:
            del os.environ[k]
        os.environ.update(saved)


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _section_fields(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = Settings
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        ann = field.annotation if field else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return sorted(model.model_fields)


# Keys an earlier build read, and what replaced them: the error names the new key instead of "unknown".
RENAMED = {
    "sandbox.command_timeout_s": "sandbox.exec_timeout_s (an agent's command is limited by harness.command_timeout_s)",
}


def _config_error(e: ValidationError, path: Path) -> ConfigError:
    problems, hints = [], []
    for err in e.errors():
        key = ".".join(str(p) for p in err["loc"])
        env_name = "APPLIANCE_" + "__".join(str(p) for p in err["loc"]).upper()
        where = f"(in {path} or ${env_name})"
        if err["type"] == "extra_forbidden" and key in RENAMED:
            problems.append(f"{key!r} {where} is now {RENAMED[key]}")
        elif err["type"] == "extra_forbidden":
            problems.append(f"unknown key {key!r} {where}")
            valid = _section_fields(err["loc"])
            if valid:
                hints.append(f"valid keys here: {', '.join(valid)}")
        else:
            problems.append(f"{key} = {err.get('input')!r} {where}: {err['msg']}")
    hints.append("`appliance config` lists every key with its help text")
    return ConfigError("invalid configuration: " + "; ".join(problems), "; ".join(hints))


def describe_fields(model: type[BaseModel] = Settings, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, help) for every leaf field: the reference `appliance config` prints."""
    rows: list[tuple[str, str, str]] = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows += describe_fields(ann, f"{prefix}{name}.")
        else:
            default = field.get_default(call_default_factory=True)
            rows.append((f"{prefix}{name}", repr(default), field.description or ""))
    return rows
