"""Learning: GRPO-family RL and SFT over the appliance's own rollouts, LoRA or full, time-sliced with serving.

The only package that imports torch, transformers, peft and TRL; nothing imports it at start-up (the CLI
and the loop import its modules inside the functions that train), so `appliance status` stays fast and the
serving process never loads a trainer. `advantages` is pure Python and safe to import anywhere.
See docs/DESIGN.md, "Learning: how we use TRL".
"""
