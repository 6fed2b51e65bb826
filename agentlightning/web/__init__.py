"""HTTP server plumbing shared by every server we ship (store, LLM proxy, gateway, `agl serve`, dashboard).

- `launcher`: run an ASGI app with uvicorn (thread, event loop or processes) on a port bound first.
- `slow_clients`: uvicorn's protocol with header and body deadlines, and fair use of file descriptors.
- `body_limit`: 413 for oversize bodies, answered (the body is drained, not reset).
- `browser_guard`: 403 for requests a web page made a browser send (foreign Origin, DNS rebinding).
- `hardening`: the one call that puts these limits and the validation answers on an app.
- `pause`: `PauseGate`, holding model calls while weights change.
"""
