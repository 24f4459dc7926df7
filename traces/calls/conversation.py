"""Every wire format read as one conversation: a call's request and response rewritten in the
chat-completions shape (system/user/assistant/tool messages, `tool_calls`, `reasoning_content`),
so a Responses, Messages, text-completion or embeddings call reads the way a chat completion
does. Only for reading: the stored call keeps what went over the wire.

The conversation of a rollout is rebuilt here once, from its recorded calls in order (`turns`),
for everything that shows it: the seed page (what each call added), the judge's prompt (each
message once, `transcript`) and the SFT export (what the model saw in its last call and its
answer, `sample`). A streamed call is stored assembled (`traces.calls.wire.response_from_stream`), so
it reads as a plain one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from traces.calls.messages import assistant_message

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


# --- A rollout's calls as one conversation -------------------------------------------------------

# A recorded call: (route, request, response), as stored.
Exchange = tuple[str, Any, Any]


@dataclass
class Turn:
    """One call of a rollout read as chat. `context` is every message the model was shown (with a
    Responses `previous_response_id`, the conversation of that response too); `new` those not
    already in the conversation: the whole request when it does not continue it (`rewritten`)."""

    context: list[dict[str, Any]]
    new: list[dict[str, Any]]
    rewritten: bool
    answer: dict[str, Any] | None
    finish_reason: str
    tools: Any


def turns(calls: Iterable[Exchange]) -> list[Turn]:
    """The calls of one rollout, in order, each read as chat against the ones before it. Agents
    resend their history: a call that continues it adds only its new messages."""
    out: list[Turn] = []
    history: list[str] = []  # the conversation so far, each message as `_canonical` writes it
    said: dict[str, list[dict[str, Any]]] = {}  # a Responses answer's id -> its conversation
    for route, request, response in calls:
        chat, answer_doc = as_chat(route, request, response)
        chat = chat if isinstance(chat, dict) else {}
        sent = chat.get("messages")
        sent = [m for m in sent if isinstance(m, dict)] if isinstance(sent, list) else []
        before = said.get(str(chat.get("previous_response_id") or ""))
        context = _chained(before, sent) if before is not None else sent
        keys = [_canonical(m) for m in context]
        continues = keys[: len(history)] == history
        answer, finish = assistant_message(answer_doc)
        tools = chat.get("tools")
        new = context[len(history) :] if continues else context
        out.append(Turn(context, new, bool(history) and not continues, answer, finish, tools))
        history = keys + ([_canonical(answer)] if answer else [])
        if route == "responses" and isinstance(answer_doc, dict) and answer_doc.get("id"):
            said[str(answer_doc["id"])] = [*context, *([answer] if answer else [])]
    return out


def _chained(before: list[dict[str, Any]], sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A Responses call on top of an earlier response: that response's conversation, then what
    this call sends. Instructions are not carried over: this call's own stand first."""
    system = [m for m in sent[:1] if m.get("role") == "system"]
    if system and before and before[0].get("role") == "system":
        before = before[1:]
    return [*system, *before, *sent[len(system) :]]


def transcript(calls: Iterable[Exchange]) -> list[dict[str, Any]]:
    """The conversation of a rollout, each message once, tool calls and tool results included:
    every call's new messages then its answer (a call that does not continue the history starts
    a new thread, whole)."""
    messages: list[dict[str, Any]] = []
    for turn in turns(calls):
        messages.extend(turn.new)
        if turn.answer is not None:
            messages.append(turn.answer)
    return messages


def sample(calls: Iterable[Exchange]) -> dict[str, Any] | None:
    """The last call as a chat fine-tuning sample: `messages` as the model saw them, then its
    answer, and the `tools` it was offered; None when it has no conversation or no answer."""
    last = (turns(calls) or [None])[-1]
    if last is None or last.answer is None or not last.context:
        return None
    line: dict[str, Any] = {"messages": [*last.context, last.answer]}
    if last.tools:
        line["tools"] = last.tools
    return line


def continues_elsewhere(request: Any) -> bool:
    """Whether a request leaves its history to a response the provider keeps (Responses'
    `previous_response_id`): its conversation needs the calls before it."""
    return isinstance(request, dict) and bool(request.get("previous_response_id"))


def _canonical(message: Any) -> str:
    if isinstance(message, dict):
        # Clients echo assistant messages back with fields added or dropped (refusal: null,
        # annotations: [], reasoning...); compare what the conversation is made of.
        message = {
            k: message.get(k)
            for k in ("role", "content", "tool_calls", "tool_call_id")
            if message.get(k) not in (None, [], "")
        }
    return json.dumps(message, sort_keys=True, default=str)
