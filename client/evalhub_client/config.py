"""Where the server is and the key to it: `--url`/`--api-key`, else `EVALHUB_URL` /
`EVALHUB_API_KEY`, else the file `evalhub login` writes (`EVALHUB_CONFIG`, default
`$XDG_CONFIG_HOME/evalhub/config.json`, readable by its owner only)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from evalhub_client.errors import CliError, Exit

DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class Config:
    url: str
    """The server's base URL, without `/api` (the dashboard lives there too)."""
    api_key: str
    """The bearer key of every `/api` call ("" when none is set: the server answers 401)."""


def config_path() -> Path:
    explicit = os.environ.get("EVALHUB_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "evalhub" / "config.json"


def _file_values() -> dict[str, str]:
    path = config_path()
    try:
        values = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CliError(
            f"cannot read {path}: {exc} (run `evalhub login` again)", Exit.USAGE
        ) from None
    return (
        {k: v for k, v in values.items() if isinstance(v, str)} if isinstance(values, dict) else {}
    )


def config_load(*, url: str | None = None, api_key: str | None = None) -> Config:
    stored = _file_values()
    chosen_url = url or os.environ.get("EVALHUB_URL") or stored.get("url") or DEFAULT_URL
    key = api_key or os.environ.get("EVALHUB_API_KEY") or stored.get("api_key") or ""
    return Config(url=url_normalize(chosen_url), api_key=key)


def url_normalize(url: str) -> str:
    url = url.strip().rstrip("/")
    if url.endswith("/api"):
        url = url[: -len("/api")]
    if not url.startswith(("http://", "https://")):
        raise CliError(
            f"the server URL must start with http:// or https://; got {url!r}", Exit.USAGE
        )
    return url


def config_save(config: Config) -> Path:
    """Write the file `config_load` reads, created readable by its owner only (it holds a key)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump({"url": config.url, "api_key": config.api_key}, out, indent=2)
    os.chmod(path, 0o600)
    return path
