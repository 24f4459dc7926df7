"""The `evalhub` command: a client of evalhub's REST API (docs/cli.md). It imports nothing of
the server: it installs alone, with httpx, click, rich and pyyaml."""

__version__ = "0.1.0"
