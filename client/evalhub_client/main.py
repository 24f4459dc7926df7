"""`evalhub`: the command's entry point. Every failure ends as one line on stderr and an exit
code of its own (errors.Exit), never a traceback."""

from __future__ import annotations

import os
import sys

import click

from evalhub_client import __version__, commands_jobs, commands_numbers, commands_results
from evalhub_client.errors import CliError, Exit
from evalhub_client.output import State, say


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url", envvar="EVALHUB_URL", help="The server (default: EVALHUB_URL, then `evalhub login`'s)."
)
@click.option(
    "--api-key",
    envvar="EVALHUB_API_KEY",
    help="An API key (default: EVALHUB_API_KEY, then `evalhub login`'s).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (every command).")
@click.version_option(__version__, prog_name="evalhub")
@click.pass_context
def cli(ctx: click.Context, url: str | None, api_key: str | None, as_json: bool) -> None:
    """Run eval jobs on evalhub and decide with their numbers (docs/cli.md)."""
    ctx.obj = State(url=url, api_key=api_key, json=as_json)


for command in (
    commands_jobs.login, commands_jobs.submit, commands_jobs.status, commands_jobs.watch,
    commands_jobs.cancel, commands_jobs.rerun, commands_jobs.replay, commands_jobs.jobs_list,
    commands_results.results, commands_results.traces, commands_results.export,
    commands_numbers.compare, commands_numbers.gate, commands_numbers.plan,
):  # fmt: skip
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    try:
        code = cli.main(args=argv, prog_name="evalhub", standalone_mode=False)
    except CliError as exc:
        say(exc.message)
        sys.exit(int(exc.code))
    except click.exceptions.Abort:
        say("aborted")
        sys.exit(int(Exit.INTERRUPTED))
    except click.UsageError as exc:
        hint = (
            f" (see `evalhub {exc.ctx.command_path.split(' ', 1)[-1]} --help`)" if exc.ctx else ""
        )
        say(f"{exc.format_message()}{hint}")
        sys.exit(int(Exit.USAGE))
    except click.ClickException as exc:
        say(exc.format_message())
        sys.exit(int(Exit.USAGE))
    except KeyboardInterrupt:
        sys.exit(int(Exit.INTERRUPTED))
    except Exception as exc:  # a bug, or an answer no evalhub gives: still one line
        if os.environ.get("EVALHUB_DEBUG"):
            raise
        say(f"unexpected {type(exc).__name__}: {exc} (EVALHUB_DEBUG=1 shows where)")
        sys.exit(int(Exit.BUG))
    sys.exit(code if isinstance(code, int) else 0)
