"""The inference engine: the vLLM process that serves the policy, its state machine, weight sync, canary."""

from appliance.serving.engine import Engine, Weights

__all__ = ["Engine", "Weights"]
