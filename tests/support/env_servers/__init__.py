"""Environment servers built with the real libraries, each run by its own virtualenv's Python
(`.venv-env/<name>`, tests/support/env_venvs) as a process on a loopback port."""
