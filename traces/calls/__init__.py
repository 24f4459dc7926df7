"""LLM calls: recording one (usage, cost), prices, wire formats, the conversation read from recorded calls."""
