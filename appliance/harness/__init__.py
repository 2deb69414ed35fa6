"""Harnesses: the agent programs whose model calls the appliance records and learns from.

`base` holds what a runner needs to drive any harness (the `Shell` seam, limits, the `Episode` record);
`builtin` is the built-in bash-tool agent, `actions` its forgiving action parser.
"""
