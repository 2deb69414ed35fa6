"""`appliance train` without anything to train on fails with a hint, not a traceback."""

from __future__ import annotations

from click.testing import CliRunner

from appliance.cli import main


def test_train_without_a_run_says_how_to_start_one(settings, store):
    result = CliRunner().invoke(main, ["train", "--steps", "2"], env={"APPLIANCE_HOME": str(settings.home)})
    assert result.exit_code != 0
    assert "no run to train on" in result.output and "appliance run" in result.output
    assert "Traceback" not in result.output
