"""One settings tree for the whole appliance.

Values come from, highest priority first: `APPLIANCE_*` environment variables (nested keys joined by
`__`, e.g. `APPLIANCE_ENGINE__PORT=8001`), the TOML file (`--config PATH`, else `$APPLIANCE_CONFIG`, else
`$APPLIANCE_HOME/appliance.toml`), the defaults of the chosen profile (`cpu` = the embedded default,
`gpu` = a GPU server), then the field defaults below. Every field carries a help text (`appliance
config` prints them). An unknown key or a bad value is a `ConfigError` that names the key, the value
received and what is allowed.
"""

from appliance.config.loading import config_file_path, describe_fields, load_settings
from appliance.config.settings import (
    BUNDLED_MODEL_NAME,
    DEFAULT_HOME,
    PROFILE_DEFAULTS,
    EngineSettings,
    EvaluationSettings,
    ExternalHarnessSettings,
    HarnessSettings,
    LoopSettings,
    PodmanSettings,
    Profile,
    ProxySettings,
    SandboxSettings,
    Section,
    Settings,
    TrainingSettings,
    default_harnesses,
)

__all__ = [
    "BUNDLED_MODEL_NAME", "DEFAULT_HOME", "PROFILE_DEFAULTS", "EngineSettings", "EvaluationSettings",
    "ExternalHarnessSettings", "HarnessSettings", "LoopSettings", "PodmanSettings", "Profile", "ProxySettings",
    "SandboxSettings", "Section", "Settings", "TrainingSettings", "config_file_path", "default_harnesses",
    "describe_fields", "load_settings",
]
