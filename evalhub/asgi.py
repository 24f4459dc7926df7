import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalhub.settings")

django_application = get_asgi_application()

# The LLM interceptor is a lean ASGI app beside Django, in the same process: it is on the hot
# path of every LLM call and skips Django's request machinery (see traces/interceptor.py).
from traces.interceptor import PREFIX as INTERCEPTOR_PREFIX  # noqa: E402 - needs Django set up
from traces.interceptor import interceptor  # noqa: E402


async def application(scope, receive, send):
    if scope["type"] == "http" and scope["path"].startswith(INTERCEPTOR_PREFIX):
        return await interceptor(scope, receive, send)
    if scope["type"] == "lifespan":
        return await _lifespan(receive, send)
    return await django_application(scope, receive, send)


async def _lifespan(receive, send):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await interceptor.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
