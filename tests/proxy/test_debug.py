"""`appliance calls`: a rollout's recorded calls, without an engine."""

from __future__ import annotations

import json

from click.testing import CliRunner

from appliance.cli import main
from appliance.proxy import hash_token
from appliance.proxy.debug import open_debug_route
from appliance.schemas import ModelCall


def test_calls_json_lists_ids_lengths_logprobs_and_latency(store, home) -> None:
    route = open_debug_route(store, "http://127.0.0.1:1", policy_version=3)
    token = route.openai_base_url.split("/r/")[1].removesuffix("/v1")
    assert store.rollout_by_route(hash_token(token)).id == route.rollout_id  # only the hash is stored
    store.add_model_call(ModelCall(None, route.rollout_id, -1, "ok", {"model": "policy"}, {"x": 1},
                                   [1, 2, 3], [4, 5], [-0.5, -0.25], 3, 0.012))
    result = CliRunner().invoke(main, ["calls", route.rollout_id, "--json"], env={"APPLIANCE_HOME": str(home)})
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["prompt_ids"] == [1, 2, 3] and row["completion_ids"] == [4, 5]
    assert row["logprobs"] == [-0.5, -0.25] and row["completion_len"] == 2 and row["policy_version"] == 3
    assert "request" not in row


def test_calls_of_an_unknown_rollout_is_a_friendly_error(store, home) -> None:
    result = CliRunner().invoke(main, ["calls", "nope"], env={"APPLIANCE_HOME": str(home)})
    assert result.exit_code == 1 and "no rollout 'nope'" in result.output
