"""The inference engine: the vLLM process that serves the policy, its state machine, weight sync, canary."""
