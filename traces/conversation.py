"""Every wire format read as one conversation: a call's request and response rewritten in the
chat-completions shape (system/user/assistant/tool messages, `tool_calls`, `reasoning_content`),
so the trace documents and the dashboard show a Responses, Messages, text-completion or
embeddings call the way they show a chat completion. Only for reading: the stored call keeps
what went over the wire.
"""

from __future__ import annotations

import json
from typing import Any

_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
                 "max_tokens": "length", "pause_turn": "stop", "refusal": "content_filter"}  # fmt: skip
_OWN_FIELDS = {
    "messages": ("messages", "system", "tools"),
    "responses": ("input", "instructions", "tools"),
    "completions": ("prompt",),
    "embeddings": ("input",),
}


def as_chat(route: str, request: Any, response: Any) -> tuple[Any, Any]:
    """(request, response) of a call of `route`, in the chat-completions shape."""
    if route not in _OWN_FIELDS or not isinstance(request, dict):
        return request, response
    params = {k: v for k, v in request.items() if k not in _OWN_FIELDS[route]}
    if route == "messages":
        chat = {**params, "messages": _anthropic_messages(request), "tools": _tools(request)}
        return chat, _anthropic_response(response)
    if route == "responses":
        chat = {**params, "messages": _responses_messages(request), "tools": _tools(request)}
        return chat, _responses_response(response)
    user = request.get("prompt" if route == "completions" else "input")
    text = user if isinstance(user, str) else json.dumps(user, ensure_ascii=False)
    return {**params, "messages": [{"role": "user", "content": text}]}, _text_response(
        route, response
    )


def _tools(request: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = []
    for tool in request.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if "function" in tool:  # already chat-shaped
            tools.append(tool)
        elif tool.get("name"):
            schema = tool.get("input_schema", tool.get("parameters"))
            function = {"name": tool["name"], "description": tool.get("description"),
                        "parameters": schema}  # fmt: skip
            tools.append({"type": "function", "function": function})
        else:  # a provider's own tool (web search, code interpreter...)
            tools.append({"type": str(tool.get("type") or "tool")})
    return tools or None


def _call(id_: Any, name: Any, arguments: Any) -> dict[str, Any]:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


def _text(content: Any) -> Any:
    """Text parts of a content list as chat's `{"type": "text"}` parts; a string as is."""
    if not isinstance(content, list):
        return content
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
            parts.append({"type": "text", "text": part.get("text") or ""})
        elif isinstance(part, dict):
            parts.append({"type": str(part.get("type") or "part")})
    return parts


# --- Anthropic Messages --------------------------------------------------------------------------


def _anthropic_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    system = request.get("system")
    if system:
        out.append({"role": "system", "content": _text(system)})
    for message in request.get("messages") or []:
        if isinstance(message, dict):
            out.extend(_anthropic_message(message))
    return out


def _anthropic_message(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return [{"role": message.get("role"), "content": content}]
    results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    rest = [b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_result")]
    out = [
        {"role": "tool", "tool_call_id": r.get("tool_use_id"), "content": _text(r.get("content"))}
        for r in results
    ]
    if rest or not results:
        out.append(_anthropic_blocks(message.get("role"), rest))
    return out


def _anthropic_blocks(role: Any, blocks: list[Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "content": _text(blocks)}
    message["content"] = [p for p in message["content"] if p.get("type") in ("text", "image")]
    calls = [
        _call(b.get("id"), b.get("name"), b.get("input"))
        for b in blocks
        if isinstance(b, dict) and b.get("type") in ("tool_use", "server_tool_use")
    ]
    if calls:
        message["tool_calls"] = calls
    thinking = [b.get("thinking") for b in blocks if isinstance(b, dict) and b.get("thinking")]
    if thinking:
        message["reasoning_content"] = "\n".join(thinking)
    if all(p.get("type") == "text" for p in message["content"]):
        message["content"] = "".join(p["text"] for p in message["content"]) or None
    return message


def _anthropic_response(response: Any) -> Any:
    if not isinstance(response, dict) or not isinstance(response.get("content"), list):
        return response
    message = _anthropic_blocks("assistant", response["content"])
    finish = _STOP_REASONS.get(response.get("stop_reason"), response.get("stop_reason"))
    return {"id": response.get("id"), "model": response.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": response.get("usage")}  # fmt: skip


# --- OpenAI Responses ----------------------------------------------------------------------------


def _responses_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.get("instructions"):
        out.append({"role": "system", "content": request["instructions"]})
    items = request.get("input")
    if isinstance(items, str):
        return [*out, {"role": "user", "content": items}]
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            _responses_item(out, item)
    return out


def _responses_item(out: list[dict[str, Any]], item: dict[str, Any]) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        out.append({"role": item.get("role"), "content": _text(item.get("content"))})
        return
    if kind == "function_call_output":
        out.append({"role": "tool", "tool_call_id": item.get("call_id"),
                    "content": item.get("output")})  # fmt: skip
        return
    # An assistant item (a call, reasoning): joined to the assistant message it belongs to.
    if not out or out[-1].get("role") != "assistant":
        out.append({"role": "assistant", "content": None})
    assistant = out[-1]
    if kind == "function_call":
        call = _call(item.get("call_id"), item.get("name"), item.get("arguments"))
        assistant.setdefault("tool_calls", []).append(call)
    elif kind == "reasoning":
        summary = [s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict)]
        if summary:
            assistant["reasoning_content"] = "\n".join(summary)


def _responses_response(response: Any) -> Any:
    if not isinstance(response, dict) or not isinstance(response.get("output"), list):
        return response
    out: list[dict[str, Any]] = []
    for item in response["output"]:
        if isinstance(item, dict):
            _responses_item(out, {**item, "role": item.get("role", "assistant")})
    message: dict[str, Any] = {"role": "assistant", "content": None}
    for part in out:  # the items of one answer are one assistant message
        for key, value in part.items():
            if key == "content" and isinstance(value, list):
                value = "".join(p.get("text", "") for p in value) or None
            if value is not None and key != "role":
                message[key] = value
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    if response.get("status") == "incomplete":
        finish = "length"
    return {"id": response.get("id"), "model": response.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": response.get("usage")}  # fmt: skip


# --- Text completions and embeddings -------------------------------------------------------------


def _text_response(route: str, response: Any) -> Any:
    if not isinstance(response, dict):
        return response
    if route == "embeddings" and isinstance(response.get("data"), list):
        data = response["data"]
        size = len(data[0].get("embedding") or []) if data and isinstance(data[0], dict) else 0
        text = f"[{len(data)} embedding(s) of {size} dimensions]"
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "finish_reason": "stop"}  # fmt: skip
        return {"model": response.get("model"), "choices": [choice]}
    if not isinstance(response.get("choices"), list):
        return response
    choices = [
        {**c, "message": {"role": "assistant", "content": c.get("text")}}
        for c in response["choices"]
        if isinstance(c, dict)
    ]
    return {**response, "choices": choices}
