"""A fake OpenAI-compatible LLM provider, to try evalhub (and a task app of your own) without a
paid one.

`make fake-llm` (`python -m evalhub.fakeprovider`) serves it on 127.0.0.1:8011 (`--port`,
`make fake-llm FAKE_LLM_PORT=...`); evalhub started against it in another terminal:

    OPENAI_BASE_URL=http://127.0.0.1:8011/v1 OPENAI_API_KEY=sk-fake make run

It answers an arithmetic question ("What is 7 * 6?") with its result, right most of the time
(one question in `chat.WRONG_ONE_IN` is off by one, always the same ones), so a task app has
something to score; calls the first tool a request offers; says any other message back; and
reports usage as a real provider does (1,200 prompt and 300 completion tokens unless steered),
so tokens and cost show. `make demo` starts it itself when OPENAI_API_KEY is not set, and the
tests run it as the one thing they fake, the paid provider (server.py: how a request steers it).
"""

from evalhub.fakeprovider.chat import arithmetic_answer, completion, stream_chunks
from evalhub.fakeprovider.judge import JUDGE_USAGE, judge_score
from evalhub.fakeprovider.server import MODELS, FakeOpenAI

DEFAULT_PORT = 8011
# Any key will do: the fake accepts every key. evalhub needs one to call a provider at all.
FAKE_KEY = "sk-fake"

__all__ = [
    "DEFAULT_PORT",
    "FAKE_KEY",
    "JUDGE_USAGE",
    "MODELS",
    "FakeOpenAI",
    "arithmetic_answer",
    "completion",
    "judge_score",
    "stream_chunks",
]
