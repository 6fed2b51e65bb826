"""Size limits shared by the store server and its client (kept free of server imports for client processes)."""

__all__ = ["DEFAULT_MAX_BODY_SIZE"]

# Largest request body the server accepts by default; the client splits span batches to stay under it.
DEFAULT_MAX_BODY_SIZE = 16 * 1024 * 1024
