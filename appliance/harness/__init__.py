"""Harnesses: the agent programs whose model calls the appliance records and learns from.

`base` holds what a runner needs to drive any harness (limits, the `Episode` record; the `Shell` seam is in
`appliance.seams`);
`builtin` is the built-in bash-tool agent, `actions` its forgiving action parser.
"""
