"""Dynamic sampling (issue 15): a group without reward variance gets bounded extra draws."""

from __future__ import annotations

from appliance.loop import extra_draws_for


def test_a_group_without_variance_draws_group_size_more_up_to_the_bound():
    assert extra_draws_for([0.0] * 4, 4, 4) == 4
    assert extra_draws_for([0.0] * 8, 4, 4) == 0  # the bound: 4 extra drawn
    assert extra_draws_for([1.0] * 4, 4, 6) == 4 and extra_draws_for([1.0] * 8, 4, 6) == 2
    assert extra_draws_for([0.0] * 4, 4, 0) == 0  # off


def test_no_more_draws_once_rewards_differ_or_nothing_valid():
    assert extra_draws_for([0.0, 0.0, 1.0, 0.0], 4, 4) == 0
    assert extra_draws_for([], 4, 4, drawn=4) == 0  # every rollout an infra error: more would fail too
    assert extra_draws_for([0.0, 0.0], 4, 4, drawn=4) == 4  # two infra errors count as drawn
