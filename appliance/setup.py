"""`appliance init`: prepare the data directory once, idempotently.

Creates APPLIANCE_HOME, migrates the store, writes the appliance's own Podman configuration (selected
through CONTAINERS_CONF / CONTAINERS_STORAGE_CONF, never by editing system files), converts the bundled
model when the default model is used, and builds the sandbox image and the configured third-party
harness images when their recipes changed.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.config import Settings
from appliance.store import Store


def initialise(settings: Settings, *, model: bool = True, image: bool = True, harnesses: bool = True,
               log: Callable[[str], None] = print) -> None:
    settings.home.mkdir(parents=True, exist_ok=True)
    store = Store(settings.db_path)
    store.close()
    log(f"store ready at {settings.db_path}")

    from appliance.sandbox import build_image, write_podman_config

    write_podman_config(settings)
    log(f"podman config in {settings.podman_dir}")

    if model and settings.engine.model is None:
        from appliance.serving.bundled_model import convert_bundled_model

        if convert_bundled_model(settings.model_path):
            log(f"converted the bundled model into {settings.model_path}")
        else:
            log(f"model ready at {settings.model_path}")
    if image:
        log(f"sandbox image {build_image(settings, log=log)}")
    if image and harnesses:
        from appliance.harness.external import harness_image

        for name, spec in settings.harnesses.items():
            if spec.at_init:
                log(f"harness {name}: image {harness_image(settings, name, log)}")
            else:
                log(f"harness {name}: built at its first rollout (harnesses.{name}.at_init is off)")
