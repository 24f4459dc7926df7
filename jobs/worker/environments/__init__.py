"""Environments that are not synth task apps: the agent loop evalhub runs, and the MCP-Gym, OpenEnv and Atropos adapters."""
