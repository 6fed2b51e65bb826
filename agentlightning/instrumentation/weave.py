"""An in-memory Weave trace server, so Weave ops and integrations trace without W&B and without network.

`instrument_weave()` installs a `WeaveClient` backed by `InMemoryWeaveTraceServer` as Weave's global
client (instead of `weave.init`, which logs into W&B), turns off Weave's error reporting to Sentry and its
call links, and lets Weave patch the LLM libraries it integrates with (OpenAI, Anthropic, LiteLLM...). The
server keeps the objects Weave publishes (ops, tables, files) and hands every finished call to its
listeners as a `WeaveCallRecord`; it does not keep calls (the `WeaveTracer` turns them into spans).

Weave's OpenAI integration rebuilds streamed completions from known fields only; the instrumentation also
carries vLLM-style `prompt_token_ids` / per-choice `token_ids` of the chunks into the recorded output.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

try:
    import weave  # noqa: F401
    from weave.trace.context import weave_client_context
    from weave.trace.weave_client import WeaveClient
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("agentlightning.instrumentation.weave needs Weave: pip install agentlightning[weave]") from exc

__all__ = [
    "DEFAULT_WEAVE_ENTITY",
    "DEFAULT_WEAVE_PROJECT",
    "OFFLINE_WEAVE_SETTINGS",
    "WeaveCallRecord",
    "InMemoryWeaveTraceServer",
    "instrument_weave",
    "uninstrument_weave",
    "get_weave_trace_server",
    "get_weave_client",
    "weave_settings",
]

logger = logging.getLogger(__name__)

DEFAULT_WEAVE_ENTITY = "agentlightning"
DEFAULT_WEAVE_PROJECT = "agentlightning"
OFFLINE_WEAVE_SETTINGS: dict[str, Any] = {
    "print_call_link": False,
    "use_server_cache": False,
    "enable_wal": False,
}
"""Weave user settings forced by the instrumentation: no W&B links, no disk cache, no write-ahead log."""


# ---- the server ----


@dataclass
class WeaveCallRecord:
    """One finished Weave call, as its start and end requests described it (times in epoch seconds)."""

    id: str
    trace_id: str
    parent_id: Optional[str]
    op_name: str
    display_name: Optional[str]
    started_at: float
    ended_at: float
    attributes: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    output: Any = None
    summary: dict[str, Any] = field(default_factory=dict)
    exception: Optional[str] = None

    @property
    def short_op_name(self) -> str:
        """`weave:///entity/project/op/name:digest` -> `name`."""
        name = self.op_name
        if name.startswith("weave:") and "/op/" in name:
            name = name.rsplit("/op/", 1)[1]
            name = name.split(":", 1)[0]
        return name


CallListener = Callable[[WeaveCallRecord], None]


def _field(obj: Any, name: str, default: Any = None) -> Any:
    """Read a request field whether Weave sent a TypedDict (>= 0.53) or a pydantic model (older)."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)  # type: ignore[union-attr]
    return getattr(obj, name, default)


def _seconds(value: Any) -> float:
    if isinstance(value, datetime.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        return moment.timestamp()
    if isinstance(value, str):
        return _seconds(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")))
    if isinstance(value, (int, float)):
        return float(value)
    raise TypeError(f"cannot read a timestamp from {value!r} ({type(value).__name__})")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json_digest(value: Any) -> str:
    return _digest(json.dumps(value, sort_keys=True, default=str).encode("utf-8"))


def _plain(value: Any) -> Any:
    """A JSON-like copy (Weave already sends JSON-able values; models are dumped just in case)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump()
    return value


def _response(names: tuple[str, ...], **fields: Any) -> Any:
    """Build a response model by name: `weave_server_sdk.types` (>= 0.53), else `trace_server_interface`."""
    modules = ("weave.vendor.weave_server_sdk.types", "weave.trace_server.trace_server_interface")
    for module_name in modules:
        try:
            module = __import__(module_name, fromlist=["_"])
        except ImportError:
            continue
        for name in names:
            cls = getattr(module, name, None)
            if cls is not None:
                return cls(**fields)
    raise ImportError(f"this Weave version has none of {names}; install a supported one: pip install 'weave>=0.52.22'")


class InMemoryWeaveTraceServer:
    """The part of Weave's trace-server protocol that tracing uses, answered from memory.

    Calls are paired by id (Weave may deliver a call's end before its start, from different threads),
    passed to the listeners once complete, and then forgotten. Anything else Weave asks for (queries,
    feedback, evaluations) raises `AttributeError`, which Weave treats as an unsupported feature.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starts: dict[str, Any] = {}
        self._early_ends: dict[str, Any] = {}
        self._listeners: list[CallListener] = []
        self.objects: dict[tuple[str, str], Any] = {}
        self.files: dict[str, bytes] = {}
        self.tables: dict[str, list[Any]] = {}
        self.n_finished_calls = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"{type(self).__name__} does not support Weave's {name!r}: it only records calls for agent-lightning"
        )

    # ---- listeners ----

    def add_call_listener(self, listener: CallListener) -> None:
        with self._lock:
            self._listeners = [*self._listeners, listener]

    def remove_call_listener(self, listener: CallListener) -> None:
        with self._lock:
            self._listeners = [item for item in self._listeners if item is not listener]

    @property
    def n_pending_calls(self) -> int:
        """Calls started (or ended) whose other half has not arrived yet."""
        with self._lock:
            return len(self._starts) + len(self._early_ends)

    # ---- project ----

    def ensure_project_exists(self, entity: str, project: str) -> Any:
        from weave.trace_server_bindings.models import EnsureProjectExistsRes

        return EnsureProjectExistsRes(project_name=project)

    def server_info(self) -> Any:
        return _response(("ServerInfoRes",), min_required_weave_python_version="0.0.0", trace_server_version="999.0.0")

    # ---- calls ----

    def call_start(self, req: Any) -> Any:
        start = _field(req, "start")
        call_id = str(_field(start, "id"))
        trace_id = str(_field(start, "trace_id"))
        with self._lock:
            end = self._early_ends.pop(call_id, None)
            if end is None:
                self._starts[call_id] = start
        if end is not None:
            self._finish(start, end)
        return _response(("CallStartResponse", "CallStartRes"), id=call_id, trace_id=trace_id)

    def call_end(self, req: Any) -> Any:
        end = _field(req, "end")
        call_id = str(_field(end, "id"))
        with self._lock:
            start = self._starts.pop(call_id, None)
            if start is None:
                self._early_ends[call_id] = end
        if start is not None:
            self._finish(start, end)
        return None

    def call_update(self, req: Any) -> Any:
        """Display-name updates of a running call; ended calls are already gone."""
        call_id = str(_field(req, "call_id"))
        display_name = _field(req, "display_name")
        with self._lock:
            start = self._starts.get(call_id)
            if start is not None and display_name is not None:
                self._starts[call_id] = {**_as_mapping(start), "display_name": display_name}
        return None

    def _finish(self, start: Any, end: Any) -> None:
        try:
            record = WeaveCallRecord(
                id=str(_field(start, "id")),
                trace_id=str(_field(start, "trace_id")),
                parent_id=_field(start, "parent_id"),
                op_name=str(_field(start, "op_name")),
                display_name=_field(start, "display_name"),
                started_at=_seconds(_field(start, "started_at")),
                ended_at=_seconds(_field(end, "ended_at")),
                attributes=dict(_plain(_field(start, "attributes")) or {}),
                inputs=dict(_plain(_field(start, "inputs")) or {}),
                output=_plain(_field(end, "output")),
                summary=dict(_plain(_field(end, "summary")) or {}),
                exception=_field(end, "exception"),
            )
        except Exception:
            logger.exception("could not read a finished Weave call; it is not recorded")
            return
        with self._lock:
            listeners = self._listeners
            self.n_finished_calls += 1
        for listener in listeners:
            try:
                listener(record)
            except Exception:
                logger.exception("a Weave call listener failed on call %s (%s)", record.id, record.short_op_name)

    # ---- objects, files, tables (kept so refs stay resolvable in this process) ----

    def obj_create(self, req: Any) -> Any:
        obj = _field(req, "obj")
        object_id = str(_field(obj, "object_id"))
        val = _plain(_field(obj, "val"))
        digest = _field(obj, "expected_digest") or _json_digest(val)
        with self._lock:
            self.objects[(object_id, digest)] = val
        return _response(("ObjectCreateResponse", "ObjCreateRes"), digest=digest, object_id=object_id)

    def file_create(self, req: Any) -> Any:
        file = _field(req, "file")
        content = file[1] if isinstance(file, tuple) else _field(req, "content", b"")
        data = content if isinstance(content, bytes) else str(content).encode("utf-8")
        digest = _field(req, "expected_digest") or _digest(data)
        with self._lock:
            self.files[digest] = data
        return _response(("FileCreateResponse", "FileCreateRes"), digest=digest)

    def table_create(self, req: Any) -> Any:
        table = _field(req, "table")
        rows = [_plain(row) for row in _field(table, "rows") or []]
        row_digests = [_json_digest(row) for row in rows]
        digest = _field(table, "expected_digest") or _digest("".join(row_digests).encode("utf-8"))
        with self._lock:
            self.tables[digest] = rows
        return _response(("TableCreateResponse", "TableCreateRes"), digest=digest, row_digests=row_digests)

    def table_create_from_digests(self, req: Any) -> Any:
        row_digests = [str(d) for d in _field(req, "row_digests") or []]
        digest = _field(req, "expected_digest") or _digest("".join(row_digests).encode("utf-8"))
        return _response(("TableCreateFromDigestsResponse", "TableCreateFromDigestsRes"), digest=digest)


def _as_mapping(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)  # type: ignore[arg-type]
    dump: Any = getattr(value, "model_dump", None)
    data: Any = dump() if callable(dump) else vars(value)
    return {str(key): item for key, item in data.items()}


# ---- streamed OpenAI token ids ----

_TOKEN_IDS_FIELD = "agentlightning_token_ids"


def _int_list(value: Any) -> Optional[list[int]]:
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):  # type: ignore[union-attr]
        return list(value)  # type: ignore[arg-type]
    return None


def _chunk_extra(obj: Any, name: str) -> Any:
    extra = getattr(obj, "model_extra", None) or {}
    return extra.get(name) if isinstance(extra, dict) else None  # type: ignore[union-attr]


def _carry_token_ids(previous: Any, chunk: Any, accumulated: Any) -> None:
    """Copy the token ids gathered so far plus those of `chunk` onto the new accumulator."""
    gathered = _chunk_extra(previous, _TOKEN_IDS_FIELD) if previous is not None else None
    state: dict[str, Any] = (
        {"prompt": gathered.get("prompt"), "choices": {int(k): list(v) for k, v in gathered["choices"].items()}}
        if isinstance(gathered, dict)
        else {"prompt": None, "choices": {}}
    )
    prompt = _int_list(_chunk_extra(chunk, "prompt_token_ids"))
    if prompt is not None and state["prompt"] is None:
        state["prompt"] = prompt
    for choice in getattr(chunk, "choices", None) or []:
        ids = _int_list(_chunk_extra(choice, "token_ids"))
        if ids is None:
            continue
        state["choices"].setdefault(int(getattr(choice, "index", 0) or 0), []).extend(ids)
        if state["prompt"] is None:
            state["prompt"] = _int_list(_chunk_extra(choice, "prompt_token_ids"))
    if state["prompt"] is not None or state["choices"]:
        setattr(accumulated, _TOKEN_IDS_FIELD, state)


def _add_token_ids(dump: Any, accumulated: Any) -> Any:
    state = _chunk_extra(accumulated, _TOKEN_IDS_FIELD)
    if not isinstance(dump, dict) or not isinstance(state, dict):
        return dump
    dump.pop(_TOKEN_IDS_FIELD, None)
    if state.get("prompt") is not None:
        dump["prompt_token_ids"] = state["prompt"]
    for choice in dump.get("choices") or []:
        if isinstance(choice, dict):
            ids = state["choices"].get(int(choice.get("index") or 0))
            if ids is not None:
                choice["token_ids"] = ids
    return dump


class _OpenAIStreamPatch:
    """Wraps Weave's OpenAI stream accumulator and finish post-processor to keep token ids."""

    def __init__(self) -> None:
        self.originals: dict[str, Any] = {}

    def install(self) -> None:
        try:
            from weave.integrations.openai import openai_sdk
        except ImportError:
            return
        if self.originals or not hasattr(openai_sdk, "openai_accumulator"):
            return
        original_accumulator = openai_sdk.openai_accumulator
        original_post = openai_sdk.openai_on_finish_post_processor

        def openai_accumulator(acc: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                result = original_accumulator(acc, value, *args, **kwargs)
            except StopIteration as stop:  # Weave ends the stream early at the usage chunk
                if stop.value is not None:
                    _carry_token_ids(acc, value, stop.value)
                raise
            _carry_token_ids(acc, value, result)
            return result

        def openai_on_finish_post_processor(value: Any) -> Any:
            return _add_token_ids(original_post(value), value)

        self.originals = {
            "openai_accumulator": original_accumulator,
            "openai_on_finish_post_processor": original_post,
        }
        openai_sdk.openai_accumulator = openai_accumulator
        openai_sdk.openai_on_finish_post_processor = openai_on_finish_post_processor

    def uninstall(self) -> None:
        if not self.originals:
            return
        from weave.integrations.openai import openai_sdk

        for name, original in self.originals.items():
            setattr(openai_sdk, name, original)
        self.originals = {}


# ---- install / uninstall ----


class _WeaveInstrumentation:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.server: Optional[InMemoryWeaveTraceServer] = None
        self.client: Optional[WeaveClient] = None
        self.previous_client: Any = None
        self.previous_settings: Any = None
        self.previous_sentry_disabled: Optional[bool] = None
        self.import_hook_registered = False
        self.patched_openai = False
        self.stream_patch = _OpenAIStreamPatch()


_state = _WeaveInstrumentation()


def _split_project(project_name: Optional[str]) -> tuple[str, str]:
    name = (project_name or DEFAULT_WEAVE_PROJECT).strip()
    parts = name.split("/")
    if len(parts) == 1 and parts[0]:
        return DEFAULT_WEAVE_ENTITY, parts[0]
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    raise ValueError(f"Weave project name {project_name!r} must be 'project' or 'entity/project'")


def _disable_sentry() -> Optional[bool]:
    try:
        from weave.telemetry import trace_sentry
    except ImportError:
        return None
    sentry = trace_sentry.global_trace_sentry
    previous = bool(getattr(sentry, "_disabled", False))
    sentry._disabled = True  # type: ignore[attr-defined]
    return previous


def _restore_sentry(previous: Optional[bool]) -> None:
    if previous is None:
        return
    from weave.telemetry import trace_sentry

    trace_sentry.global_trace_sentry._disabled = previous  # type: ignore[attr-defined]


def weave_settings(user_settings: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The Weave user settings the instrumentation applies: the user's, with the offline ones forced."""
    return {**dict(user_settings or {}), **OFFLINE_WEAVE_SETTINGS, "disabled": False}


def instrument_weave(
    project_name: Optional[str] = None,
    *,
    user_settings: Optional[Mapping[str, Any]] = None,
    patch_integrations: bool = True,
) -> InMemoryWeaveTraceServer:
    """Make Weave trace into an in-memory server (idempotent); returns the server.

    Args:
        project_name: `project` or `entity/project`, only used to name refs; nothing is created anywhere.
        user_settings: Weave `UserSettings` fields (the offline ones are forced).
        patch_integrations: let Weave patch the LLM libraries it supports, now and when they are imported.
    """
    from weave.trace import settings as weave_settings_module

    entity, project = _split_project(project_name)
    with _state.lock:
        if _state.server is not None and _state.client is not None:
            return _state.server
        server = InMemoryWeaveTraceServer()
        _state.previous_sentry_disabled = _disable_sentry()
        _state.previous_settings = weave_settings_module._current_settings.get()  # type: ignore[attr-defined]
        weave_settings_module.replace_settings(weave_settings(user_settings))
        client = WeaveClient(entity, project, server, ensure_project_exists=False)  # type: ignore[arg-type]
        _state.previous_client = weave_client_context.get_weave_client()
        weave_client_context.set_weave_client_global(client)
        _state.server, _state.client = server, client
        _state.stream_patch.install()
        if patch_integrations:
            from weave.integrations import patch as weave_patch

            openai_was_patched = "openai" in getattr(weave_patch, "_PATCHED_INTEGRATIONS", ())
            weave_patch.implicit_patch()
            if getattr(weave_patch, "_IMPORT_HOOK", None) is None:
                weave_patch.register_import_hook()
                _state.import_hook_registered = True
            _state.patched_openai = not openai_was_patched
    return server


def _undo_openai_patch() -> None:
    """Take Weave's wrappers off the OpenAI client again (ours, if installed, is put back on top)."""
    try:
        from weave.integrations import patch as weave_patch
        from weave.integrations.openai.openai_sdk import get_openai_patcher
    except ImportError:
        return
    if "openai" not in getattr(weave_patch, "_PATCHED_INTEGRATIONS", ()):
        return  # patched lazily by the import hook after we left, or never
    get_openai_patcher().undo_patch()
    getattr(weave_patch, "_PATCHED_INTEGRATIONS", set()).discard("openai")
    from .openai import instrument_openai, is_openai_instrumented

    if is_openai_instrumented():
        instrument_openai()


def get_weave_trace_server() -> Optional[InMemoryWeaveTraceServer]:
    """The server installed by `instrument_weave`, if any."""
    return _state.server


def get_weave_client() -> Optional[WeaveClient]:
    """The Weave client installed by `instrument_weave`, if any."""
    return _state.client


def uninstrument_weave() -> None:
    """Flush pending calls, then restore Weave's previous client, settings, import hook and error reporting."""
    from weave.trace import settings as weave_settings_module

    with _state.lock:
        client = _state.client
        if client is None:
            return
        try:
            client.flush()
        except Exception:
            logger.exception("could not flush the Weave client")
        if weave_client_context.get_weave_client() is client:
            weave_client_context.set_weave_client_global(_state.previous_client)
        if _state.import_hook_registered:
            from weave.integrations import patch as weave_patch

            weave_patch.unregister_import_hook()
            _state.import_hook_registered = False
        if _state.patched_openai:
            try:
                _undo_openai_patch()
            except Exception:
                logger.exception("could not remove Weave's OpenAI patch")
            _state.patched_openai = False
        _state.stream_patch.uninstall()
        if _state.previous_settings is not None:
            weave_settings_module.replace_settings(_state.previous_settings)
        _restore_sentry(_state.previous_sentry_disabled)
        _state.server = _state.client = _state.previous_client = _state.previous_settings = None
        _state.previous_sentry_disabled = None
