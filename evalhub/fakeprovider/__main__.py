"""`python -m evalhub.fakeprovider [--host H] [--port P]` (`make fake-llm`): serve the fake
provider until Ctrl-C, after printing how to start evalhub against it."""

from __future__ import annotations

import argparse
import sys

import uvicorn

from evalhub.fakeprovider import DEFAULT_PORT, FAKE_KEY, FakeOpenAI
from evalhub.ports import port_problem


def how_to_use(base_url: str) -> str:
    return (
        f"\nA fake LLM provider (no paid calls) is serving on {base_url}\n"
        "Start evalhub against it in another terminal:\n"
        f"  OPENAI_BASE_URL={base_url} OPENAI_API_KEY={FAKE_KEY} make run\n"
        "It answers arithmetic questions (right most of the time), calls the first tool it is "
        "offered\nand says anything else back. Ctrl-C stops it.\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    how = f"--port (make fake-llm FAKE_LLM_PORT={args.port + 1})"
    if problem := port_problem(args.host, args.port, how=how):
        print(f"fake provider: {problem}", file=sys.stderr)
        return 1
    print(how_to_use(f"http://{args.host}:{args.port}/v1"), flush=True)
    uvicorn.run(FakeOpenAI(), host=args.host, port=args.port, log_level="warning", lifespan="off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
