"""The REST API: views, request bodies, the OpenAPI schema, server-sent events. The top layer: it may use everything below."""
