"""Wire formats of the LLM APIs the package speaks besides Chat Completions: OpenAI Responses (`responses`)
and Anthropic Messages (`messages`), each translated to and from chat messages."""
