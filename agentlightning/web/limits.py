"""Default request limits of the servers we ship (kept free of server imports: client processes read them too)."""

__all__ = ["DEFAULT_MAX_BODY_SIZE", "DEFAULT_MAX_REQUEST_SIZE"]

#: Largest request body the store server accepts by default; the store client splits span batches to stay under it.
DEFAULT_MAX_BODY_SIZE = 16 * 1024 * 1024
#: Largest request the model servers (LLM proxy, gateway, `agl serve`) accept by default: long prompts and images.
DEFAULT_MAX_REQUEST_SIZE = 32 * 1024 * 1024
