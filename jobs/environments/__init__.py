"""Environments that are not synth task apps: MCP-Gym and OpenEnv servers, run by the worker
through one agent loop, and the bridge that serves Atropos environments as synth task apps.

`kinds` names the kinds and checks their settings, `loop` is the agent loop, `mcp_gym` and
`openenv` the two adapters, `run` what the runner calls for a probe or a rollout of any kind.
`atropos_bridge` is the `evalhub-atropos` console script: it runs outside Django and imports
nothing of the project.
"""
