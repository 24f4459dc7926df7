"""The LLM interceptor: an OpenAI-compatible proxy on the hot path of every LLM call.

A lean ASGI app mounted beside Django in the same process (see `evalhub/asgi.py`): Django's
request machinery costs more per call than this whole handler (docs/interceptor.md has the numbers).
Per call it does no database work at all once the token is cached (unless the job sets
per-rollout limits, which are counted in the database): tokens resolve from an
in-process cache (`access.py`), budgets are checked against per-job spent totals kept in memory
(`budgets.py`), and the `LLMCall` row is written by a writer thread after the caller has its
answer (`writer.py`). `routes.py` has the wire formats and picks the provider, `resilience.py`
retries, queues and falls back, `relay.py` forwards and streams, `limits.py` enforces
per-rollout limits across web processes, `clients.py` holds the pooled client, `errors.py`
the interceptor's own answers, `app.py` routing and the process's set-up. `access.py` also closes an ended attempt's
URL as its worker pushes the end (`evalhub.revocations`), or at the latest within
EVALHUB_INTERCEPTOR_REVOCATION_POLL_S.

URLs: `<INTERCEPTOR_PATH><token>/` + `chat/completions`, `responses`, `completions`,
`embeddings`, `messages` or `v1/messages` (POST), and `models` (GET).
"""

from traces.interceptor.app import Interceptor, interceptor
from traces.interceptor.errors import InterceptorError

__all__ = ["Interceptor", "InterceptorError", "interceptor"]
