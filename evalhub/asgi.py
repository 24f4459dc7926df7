import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalhub.settings")

django_application = get_asgi_application()

# The LLM interceptor is a lean ASGI app beside Django, in the same process: it is on the hot
# path of every LLM call and skips Django's request machinery (see traces/interceptor/).
from evalhub.heap import startup_heap_freeze  # noqa: E402
from traces.interceptor import interceptor  # noqa: E402 - needs Django set up
from traces.tokens import INTERCEPTOR_PATH  # noqa: E402


async def application(scope, receive, send):
    if scope["type"] == "http" and scope["path"].startswith(INTERCEPTOR_PATH):
        return await interceptor(scope, receive, send)
    if scope["type"] == "lifespan":
        return await _lifespan(receive, send)
    return await django_application(scope, receive, send)


async def _lifespan(receive, send):
    """Process set-up and tear-down of the web process (uvicorn sends these)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            interceptor.startup()
            startup_heap_freeze()  # the heap built so far, out of the collector's way
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await interceptor.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
