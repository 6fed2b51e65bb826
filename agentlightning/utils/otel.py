"""OpenTelemetry helpers: attribute flattening, tags, links, exception attributes and provider lookup."""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar, Union

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from agentlightning.semconv import LightningSpanAttributes, LinkAttributes, LinkPydanticModel
from agentlightning.types import Attributes, AttributeValue, Span

__all__ = [
    "check_attributes_sanity",
    "extract_tags_from_attributes",
    "filter_attributes",
    "full_qualified_name",
    "sanitize_attribute_value",
    "sanitize_list_attribute_sanity",
    "make_tag_attributes",
    "make_link_attributes",
    "query_linked_spans",
    "extract_links_from_attributes",
    "flatten_attributes",
    "unflatten_attributes",
    "filter_and_unflatten_attributes",
    "sanitize_attributes",
    "format_exception_attributes",
    "describe_tracer_provider",
    "get_tracer_provider",
    "get_tracer",
]

logger = logging.getLogger(__name__)

_PRIMITIVES = (str, bool, int, float)
T_Span = TypeVar("T_Span", bound=Union[Span, ReadableSpan])


# ---- flattening ----


def _is_primitive_list(value: Sequence[Any]) -> bool:
    return all(isinstance(item, _PRIMITIVES) for item in value)


def _is_homogeneous_primitive_list(value: Sequence[Any]) -> bool:
    """A valid OpenTelemetry list value: primitives, all of one type (bool is not int here)."""
    return _is_primitive_list(value) and len({type(item) for item in value}) <= 1


def flatten_attributes(
    data: Union[Mapping[str, Any], Sequence[Any]], *, expand_leaf_lists: bool = False
) -> dict[str, Any]:
    """Flatten nested dicts/lists into dotted keys (`a.b.0.c`).

    A list of primitives of one type stays one leaf value (an OpenTelemetry list attribute); lists of
    objects and mixed lists are expanded by index. `expand_leaf_lists=True` expands every list.
    """
    flat: dict[str, Any] = {}

    def visit(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            if not value and prefix:
                flat[prefix] = {}
            for key, child in value.items():  # type: ignore[union-attr]
                if not isinstance(key, str):
                    key = str(key)
                visit(f"{prefix}.{key}" if prefix else key, child)
        elif isinstance(value, (list, tuple)):
            if not expand_leaf_lists and value and _is_homogeneous_primitive_list(value):  # type: ignore[arg-type]
                flat[prefix] = list(value)  # type: ignore[arg-type]
                return
            if not value and prefix:
                flat[prefix] = []
            for index, child in enumerate(value):  # type: ignore[arg-type]
                visit(f"{prefix}.{index}" if prefix else str(index), child)
        else:
            if not prefix:
                raise ValueError(f"cannot flatten a bare value {value!r}; pass a dict or a list")
            flat[prefix] = value

    if not isinstance(data, (Mapping, list, tuple)):
        raise ValueError(f"flatten_attributes expects a dict or a list, got {type(data).__name__}")
    visit("", data)
    return flat


def _listify(node: Any) -> Any:
    """Turn dicts whose keys are exactly 0..n-1 into lists, recursively."""
    if not isinstance(node, dict):
        return node
    converted = {key: _listify(child) for key, child in node.items()}  # type: ignore[union-attr]
    keys = list(converted)
    if keys and all(k.isdigit() for k in keys):
        indices = sorted(int(k) for k in keys)
        if indices == list(range(len(indices))):
            return [converted[str(i)] for i in indices]
    return converted


def unflatten_attributes(flat: Mapping[str, Any]) -> Union[dict[str, Any], list[Any]]:
    """Rebuild the nested structure of dotted keys; dicts keyed 0..n-1 become lists.

    Raises ValueError when a key is both a leaf and a prefix (e.g. `a` and `a.b`).
    """
    root: dict[str, Any] = {}
    for key in sorted(flat, key=lambda k: k.count(".")):
        parts = key.split(".")
        node = root
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(
                    f"attribute {key!r} nests under {'.'.join(parts[: depth + 1])!r}, which is already a value"
                )
            node = child  # type: ignore[assignment]
        leaf = parts[-1]
        if leaf in node and isinstance(node[leaf], dict) and node[leaf]:
            raise ValueError(f"attribute {key!r} is both a value and a prefix of other attributes")
        node[leaf] = flat[key]
    return _listify(root)


def filter_and_unflatten_attributes(attributes: Mapping[str, Any], prefix: str) -> Union[dict[str, Any], list[Any]]:
    """Unflatten only the attributes under `prefix.` (the prefix itself is stripped)."""
    dotted = prefix if prefix.endswith(".") else prefix + "."
    selected = {key[len(dotted) :]: value for key, value in attributes.items() if key.startswith(dotted)}
    return unflatten_attributes(selected)


def full_qualified_name(obj: Any) -> str:
    """`module.QualName` of a class or function (of the type of any other object); builtins keep their
    bare name (`int`, `dict`)."""
    target = obj if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__qualname__")) else type(obj)
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", repr(target))
    if module in (None, "builtins"):
        return str(qualname)
    return f"{module}.{qualname}"


def sanitize_list_attribute_sanity(value: Sequence[Any], *, key: str = "attribute") -> list[Any]:
    """Check that `value` is a valid OpenTelemetry list attribute (primitives of one type) and return it
    as a list; raise ValueError naming `key` otherwise. An empty list is valid."""
    items = list(value)
    if not _is_primitive_list(items):
        bad = next(item for item in items if not isinstance(item, _PRIMITIVES))
        raise ValueError(
            f"{key}: list attributes may hold only str/bool/int/float, found {type(bad).__name__} ({bad!r})"
        )
    if not _is_homogeneous_primitive_list(items):
        kinds = sorted({type(item).__name__ for item in items})
        raise ValueError(f"{key}: list attributes must hold one type, found {', '.join(kinds)}")
    return items


def sanitize_attribute_value(value: Any, *, force: bool = True, key: str = "attribute") -> AttributeValue:
    """One value made OpenTelemetry-valid.

    Primitives and homogeneous primitive lists pass unchanged (tuples become lists). Anything else is
    JSON-encoded (`str()` when not JSON-serialisable) with `force=True`, or rejected with ValueError
    naming `key` with `force=False`.
    """
    if isinstance(value, _PRIMITIVES):
        return value
    if isinstance(value, (list, tuple)):
        items = list(value)  # type: ignore[arg-type]
        if _is_homogeneous_primitive_list(items):
            return items  # type: ignore[return-value]
        if not force:
            sanitize_list_attribute_sanity(items, key=key)  # raises, naming what is wrong
    if not force:
        raise ValueError(
            f"{key}: {type(value).__name__} is not a valid OpenTelemetry attribute value "
            "(str, bool, int, float or a list of one of them); pass force=True to JSON-encode it"
        )
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        logger.debug("attribute %r of type %s stored as str()", key, type(value).__name__)
        return str(value)


def sanitize_attributes(attributes: Mapping[str, Any], *, force: bool = True) -> Attributes:
    """Make attributes OpenTelemetry-valid: drop None, keep primitives and homogeneous primitive lists.

    Everything else is JSON-encoded with `force=True` (the default) or rejected with ValueError naming
    the key with `force=False`. Non-string keys are always rejected.
    """
    sanitized: Attributes = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if not isinstance(key, str):  # type: ignore[redundant-expr]
            raise ValueError(f"attribute keys must be str, got {key!r} ({type(key).__name__})")
        sanitized[key] = sanitize_attribute_value(value, force=force, key=key)
    return sanitized


def check_attributes_sanity(attributes: Mapping[str, Any]) -> None:
    """Raise ValueError unless `attributes` is already a valid flat OpenTelemetry attribute mapping:
    non-empty string keys, no key that is also a dotted prefix of another, and values that are
    primitives or homogeneous primitive lists (None is not allowed)."""
    for key, value in attributes.items():
        if not isinstance(key, str) or not key:  # type: ignore[redundant-expr]
            raise ValueError(f"attribute keys must be non-empty str, got {key!r}")
        if value is None:
            raise ValueError(f"{key}: None is not a valid OpenTelemetry attribute value")
        sanitize_attribute_value(value, force=False, key=key)
    keys = set(attributes)
    for key in keys:
        parts = key.split(".")
        for depth in range(1, len(parts)):
            prefix = ".".join(parts[:depth])
            if prefix in keys:
                raise ValueError(f"attribute {prefix!r} is both a value and a prefix of {key!r}")


def filter_attributes(attributes: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The attributes at `prefix` or under `prefix.` (keys kept whole)."""
    dotted = prefix.rstrip(".") + "."
    return {key: value for key, value in attributes.items() if key == dotted[:-1] or key.startswith(dotted)}


def format_exception_attributes(exception: BaseException, *, escaped: bool = True) -> Attributes:
    """The OpenTelemetry `exception.*` attributes describing `exception`."""
    return {
        "exception.type": type(exception).__qualname__,
        "exception.message": str(exception),
        "exception.escaped": escaped,
        "exception.stacktrace": "".join(
            traceback.format_exception(type(exception), exception, exception.__traceback__)
        ),
    }


# ---- tags and links ----


def make_tag_attributes(tags: Iterable[str]) -> Attributes:
    """`["a", "b"]` -> `{"agentlightning.tag.0": "a", "agentlightning.tag.1": "b"}`."""
    prefix = LightningSpanAttributes.TAG.value
    return {f"{prefix}.{i}": str(tag) for i, tag in enumerate(tags)}


def make_link_attributes(links: Mapping[str, Any]) -> Attributes:
    """`{key: value}` -> `agentlightning.link.<i>.key_match` / `.value_match` attributes."""
    prefix = LightningSpanAttributes.LINK.value
    attributes: Attributes = {}
    for i, (key, value) in enumerate(links.items()):
        attributes[f"{prefix}.{i}.{LinkAttributes.KEY_MATCH.value}"] = str(key)
        attributes[f"{prefix}.{i}.{LinkAttributes.VALUE_MATCH.value}"] = str(value)
    return attributes


def extract_tags_from_attributes(attributes: Mapping[str, Any]) -> list[str]:
    """Read back the tags written by `make_tag_attributes`, in index order."""
    dotted = LightningSpanAttributes.TAG.value + "."
    indexed: list[tuple[int, str]] = []
    for key, value in attributes.items():
        suffix = key[len(dotted) :] if key.startswith(dotted) else ""
        if suffix.isdigit():
            indexed.append((int(suffix), str(value)))
    return [tag for _, tag in sorted(indexed)]


def extract_links_from_attributes(attributes: Mapping[str, Any]) -> list[LinkPydanticModel]:
    """Read back the links written by `make_link_attributes`, in index order."""
    raw = filter_and_unflatten_attributes(attributes, LightningSpanAttributes.LINK.value)
    entries = (
        raw if isinstance(raw, list) else [raw[k] for k in sorted(raw, key=lambda k: int(k) if k.isdigit() else 0)]
    )
    links: list[LinkPydanticModel] = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError(f"malformed link attributes {entry!r}; expected key_match and value_match")
        links.append(LinkPydanticModel.model_validate(entry))
    return links


def _span_field(span: Union[Span, ReadableSpan], key: str) -> Any:
    attributes = span.attributes or {}
    if key in attributes:
        return attributes[key]
    if isinstance(span, Span):
        return getattr(span, key, None) if key in Span.model_fields or key in (span.model_extra or {}) else None
    if key in ("span_id", "trace_id") and span.context is not None:
        return format(getattr(span.context, key), "016x" if key == "span_id" else "032x")
    if key == "name":
        return span.name
    return None


def query_linked_spans(spans: Iterable[T_Span], links: Sequence[LinkPydanticModel]) -> list[T_Span]:
    """Spans that match every link: attribute (or span field such as `span_id`) `key_match` equals `value_match`."""
    return [span for span in spans if all(str(_span_field(span, link.key_match)) == link.value_match for link in links)]


# ---- provider lookup ----


def describe_tracer_provider(provider: TracerProvider) -> list[str]:
    """One line per span processor of `provider` (with its exporter, when it has one)."""
    multi = getattr(provider, "_active_span_processor", None)
    processors = list(getattr(multi, "_span_processors", ()) or ())
    lines: list[str] = []
    for processor in processors:
        exporter = getattr(processor, "span_exporter", None) or getattr(processor, "_exporter", None)
        line = full_qualified_name(processor)
        lines.append(line if exporter is None else f"{line} -> {full_qualified_name(exporter)}")
    return lines


def get_tracer_provider(inspect: bool = True) -> TracerProvider:
    """The process-global OpenTelemetry SDK TracerProvider.

    With `inspect=True` (the default) its span processors and exporters are logged at DEBUG level, to
    see where spans go. Raises RuntimeError when the global provider is not an SDK provider (nothing
    installed one yet): call `OtelTracer().init_worker(...)` or
    `opentelemetry.trace.set_tracer_provider(TracerProvider())` first.
    """
    provider = trace_api.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        raise RuntimeError(
            f"the global OpenTelemetry tracer provider is {type(provider).__name__}, not an SDK TracerProvider; "
            "initialise an OtelTracer (or set an SDK TracerProvider) first"
        )
    if inspect and logger.isEnabledFor(logging.DEBUG):
        processors = describe_tracer_provider(provider)
        logger.debug("tracer provider %s with span processors: %s", full_qualified_name(provider), processors or "none")
    return provider


def get_tracer(name: str = "agentlightning") -> trace_api.Tracer:
    """A tracer of the global SDK provider.

    Raises RuntimeError before a provider is set up (see `get_tracer_provider`): a tracer of the default
    proxy provider would silently drop every span.
    """
    return get_tracer_provider(inspect=False).get_tracer(name)
