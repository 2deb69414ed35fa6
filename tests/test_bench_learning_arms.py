"""`scripts/bench learning --arms` (issue 54): one run per ablation arm, same seed and budget, each in its own
home with its learner switched off, then one table; proved here with a scripted double of `appliance run`."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import bench_learning  # noqa: E402

# stands in for `appliance run --headless --minutes M`: records the settings it was given as a run of two
# iterations (the baseline and one trained), whose learning signal says which learners ran
FAKE_RUN = textwrap.dedent('''
    import os, sys
    from pathlib import Path
    from appliance.learning_signal import LearningSignal
    from appliance.schemas import CapabilityReport
    from appliance.store import Store

    env = os.environ
    assert sys.argv[1:] == ["run", "--headless", "--minutes", "0.5"], sys.argv
    rl = env.get("APPLIANCE_TRAINING__METHOD", "both") != "sft"
    own = env.get("APPLIANCE_TRAINING__SFT_ON_SUCCESSES", "true") == "true"
    store = Store(Path(env["APPLIANCE_HOME"]) / "appliance.db")
    store.create_run("run", {"seed": env["APPLIANCE_TRAINING__SEED"]})
    for it, passed in ((0, 0), (1, 5 + 3 * rl + 2 * own)):
        store.start_iteration("run", it, it)
        store.set_eval("run", it, it, "files", 2, 20, passed)
    signal = LearningSignal(1, groups=10, signal_groups=4, sampled_tokens=2000, rl_steps=int(rl),
                            rl_trained_tokens=400 * rl, entropy=0.05 if rl else None, sft_steps=2,
                            sft_tokens=600 if own else 100)
    store.save_report("run", 1, CapabilityReport(iteration=1, learning_signal=signal.as_dict()), "#")
''')


def test_each_arm_runs_with_its_learner_off_and_one_table_compares_them(tmp_path: Path, monkeypatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / "fake_appliance.py"
    fake.write_text(FAKE_RUN)
    monkeypatch.setattr(bench_learning, "APPLIANCE", [sys.executable, str(fake)])
    monkeypatch.setattr(bench_learning, "POLL_S", 0.1)
    home = tmp_path / "arms"
    assert bench_learning.main(["--arms", "default,rl-off,sft-off", "--minutes", "0.5", "--seed", "3",
                                "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert out.count("learning signal it 1: signal 4/10 groups") == 3  # each arm's own report says it too
    table = out[out.index("arm      it"):].splitlines()
    rows = {(line.split()[0], line.split()[1]): line for line in table[1:] if line.split()[1:2] != []
            and line.split()[1].isdigit()}
    assert set(rows) == {(a, i) for a in ("default", "rl-off", "sft-off") for i in ("0", "1")}
    assert "50.0% [29.9%, 70.1%]" in rows[("default", "1")]  # 10/20: both learners on
    assert "35.0%" in rows[("rl-off", "1")] and "0/2000" in rows[("rl-off", "1")]  # no RL step trained
    assert "40.0%" in rows[("sft-off", "1")] and "400/2000" in rows[("sft-off", "1")]
    assert rows[("sft-off", "1")].split()[-2:] == ["100", "0.050"]  # SFT tokens without its own successes
    assert rows[("default", "1")].split()[-4:] == ["4/10", "400/2000", "600", "0.050"]
    from appliance.store import Store

    for arm in ("default", "rl-off", "sft-off"):  # same seed in every arm, each in its own home
        store = Store(home / arm / "appliance.db")
        assert store.latest_run().config == {"seed": "3"}
        store.close()
    # the table again from the homes alone
    assert bench_learning.main(["--report-only", "--arms", "default,rl-off,sft-off", "--home", str(home)]) == 0
    assert "arm      it" in capsys.readouterr().out


def test_an_unknown_arm_is_refused_with_the_choices() -> None:
    with pytest.raises(SystemExit, match="choose from default, rl-off, sft-off"):
        bench_learning.arm_names("default,no-rl")
