"""appliance: makes a tool-using LLM agent better at its harness work, offline, on one machine."""

__version__ = "0.1.0"
