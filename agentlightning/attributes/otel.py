"""OpenTelemetry helpers: attribute flattening, tags, links, exception attributes and provider lookup."""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar, Union

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

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
    "read_nested_attribute",
    "sanitize_attributes",
    "format_exception_attributes",
    "describe_tracer_provider",
    "get_tracer_provider",
    "get_tracer",
    "get_span_processors",
]

logger = logging.getLogger(__name__)

_PRIMITIVES = (str, bool, int, float)
T_Span = TypeVar("T_Span", bound=Union[Span, ReadableSpan])
T_Processor = TypeVar("T_Processor", bound=SpanProcessor)


# ---- flattening ----


def _is_primitive_list(value: Sequence[Any]) -> bool:
    return all(isinstance(item, _PRIMITIVES) for item in value)


def _primitive_kind(value: Any) -> type:
    for kind in (bool, int, float):
        if isinstance(value, kind):
            return kind
    return str


def flatten_attributes(
    nested_data: Union[Mapping[str, Any], list[Any]], *, expand_leaf_lists: bool = False
) -> dict[str, Any]:
    """Flatten nested dicts/lists into dotted keys (`{"a": {"b": [{"c": 1}]}}` -> `{"a.b.0.c": 1}`), as v0.3.

    A non-empty list of primitives of one type (bool, int, float or str) under a key stays one leaf value
    (an OpenTelemetry list attribute) unless `expand_leaf_lists=True`; other lists are expanded by index.
    Empty dicts and lists produce no key; tuples and other values are leaves. Dict keys must be strings
    (ValueError naming the path otherwise).
    """
    if not isinstance(nested_data, (Mapping, list)):
        raise ValueError(f"flatten_attributes expects a dict or a list, got {type(nested_data).__name__}")
    flat: dict[str, Any] = {}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, Mapping):
            for key, child in value.items():  # type: ignore[union-attr]
                if not isinstance(key, str):
                    raise ValueError(
                        f"only string keys can be flattened, got {key!r} ({type(key).__name__}) under "
                        f"{prefix or 'the top level'!r}"
                    )
                walk(child, f"{prefix}.{key}" if prefix else key)
        elif isinstance(value, list):
            items: list[Any] = value  # type: ignore[assignment]
            if not expand_leaf_lists and prefix and items and _is_primitive_list(items):
                if len({_primitive_kind(item) for item in items}) == 1:
                    flat[prefix] = items
                    return
                logger.warning("list attribute %r mixes primitive types; expanding it by index", prefix)
            for index, item in enumerate(items):
                walk(item, f"{prefix}.{index}" if prefix else str(index))
        else:
            flat[prefix] = value

    walk(nested_data, "")
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

    Raises ValueError when a key is both a leaf and a prefix (e.g. `a` and `a.b`): v0.3 silently kept one
    of the two values.
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
    """Unflatten the attributes under `prefix.` (the prefix itself is stripped).

    Raises ValueError when an attribute is exactly `prefix` (a value stored whole, not flattened); see
    `read_nested_attribute` to read both shapes.
    """
    if prefix in attributes:
        raise ValueError(f"attribute {prefix!r} holds a value itself; it cannot be unflattened as a prefix")
    dotted = prefix + "."
    selected = {key[len(dotted) :]: value for key, value in attributes.items() if key.startswith(dotted)}
    return unflatten_attributes(selected)


def read_nested_attribute(attributes: Mapping[str, Any], prefix: str) -> Any:
    """The value at `prefix` in either shape, None when absent.

    Spans written by v0.3 and by this package carry nested values flattened into `prefix.*` keys; spans
    stored by earlier versions of this package carry them as one JSON-encoded attribute at `prefix`. Both
    read back as the same dict/list. A plain value at `prefix` is returned as stored.
    """
    if prefix in attributes:
        value = attributes[prefix]
        if isinstance(value, str) and value[:1] in ("{", "["):
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value
    dotted = prefix + "."
    if not any(key.startswith(dotted) for key in attributes):
        return None
    return filter_and_unflatten_attributes(attributes, prefix)


def full_qualified_name(obj: Any) -> str:
    """`module.QualName` of a class or function (of the type of any other object); builtins keep their
    bare name (`int`, `dict`)."""
    target = obj if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__qualname__")) else type(obj)
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", repr(target))
    if module in (None, "builtins"):
        return str(qualname)
    return f"{module}.{qualname}"


def sanitize_list_attribute_sanity(maybe_list: Sequence[Any], *, key: str = "attribute") -> list[Any]:
    """A list of primitives as a valid OpenTelemetry list attribute, coerced as v0.3 does.

    All str, or all bool: unchanged. bool and int mixed: ints (`True` -> 1). Numbers mixed: floats.
    Anything else (str mixed with numbers, nested values) raises ValueError naming `key`.
    """
    items = list(maybe_list)
    if all(isinstance(item, str) for item in items):
        return items
    if all(isinstance(item, bool) for item in items):
        return items
    if all(isinstance(item, (int, bool)) for item in items):
        return [int(item) for item in items]
    if all(isinstance(item, (int, float)) for item in items):
        return [float(item) for item in items]
    kinds = sorted({type(item).__name__ for item in items})
    raise ValueError(f"{key}: a list attribute must hold one primitive type, got {', '.join(kinds)}")


def sanitize_attribute_value(value: Any, force: bool = True, *, key: str = "attribute") -> AttributeValue:
    """One value made OpenTelemetry-valid, as v0.3.

    Primitives pass unchanged; lists are coerced by `sanitize_list_attribute_sanity` (or JSON-encoded when
    they cannot be). Everything else, None included, is JSON-encoded; with `force=True` (the default)
    values JSON cannot encode become `str()`, with `force=False` they raise ValueError naming `key`.
    """
    if isinstance(value, _PRIMITIVES):
        return value
    if isinstance(value, list):
        try:
            return sanitize_list_attribute_sanity(value, key=key)  # type: ignore[arg-type]
        except ValueError as exc:
            logger.debug("%s; stored as JSON", exc)
    try:
        return json.dumps(value, default=str if force else None)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{key}: a {type(value).__name__} is not JSON serialisable") from exc


def sanitize_attributes(attributes: Mapping[str, Any], force: bool = True) -> Attributes:
    """Make every value OpenTelemetry-valid with `sanitize_attribute_value` (None becomes `"null"`, as v0.3).

    Non-string keys raise ValueError.
    """
    sanitized: Attributes = {}
    for key, value in attributes.items():
        if not isinstance(key, str):  # type: ignore[redundant-expr]
            raise ValueError(f"attribute keys must be str, got {key!r} ({type(key).__name__})")
        sanitized[key] = sanitize_attribute_value(value, force=force, key=key)
    return sanitized


def check_attributes_sanity(attributes: Mapping[Any, Any]) -> None:
    """Raise ValueError naming the key unless `attributes` is a valid flat OpenTelemetry mapping: string
    keys and values that are primitives or lists `sanitize_list_attribute_sanity` accepts (None is not)."""
    for key, value in attributes.items():
        if not isinstance(key, str):
            raise ValueError(f"attribute keys must be str, got {key!r} ({type(key).__name__})")
        if isinstance(value, list):
            sanitize_list_attribute_sanity(value, key=key)  # type: ignore[arg-type]
        elif not isinstance(value, _PRIMITIVES):
            raise ValueError(
                f"{key}: attribute values must be str, int, float, bool or a list of them, got "
                f"{type(value).__name__} ({value!r})"
            )


def filter_attributes(attributes: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The attributes at `prefix` or under `prefix.` (keys kept whole)."""
    return {key: value for key, value in attributes.items() if key == prefix or key.startswith(prefix + ".")}


def format_exception_attributes(exception: BaseException, *, escaped: bool = True) -> Attributes:
    """The OpenTelemetry `exception.*` attributes describing `exception` (as v0.3: the class's `__name__`,
    the stack trace only when there is one to show)."""
    attributes: Attributes = {
        "exception.type": type(exception).__name__,
        "exception.message": str(exception),
        "exception.escaped": escaped,
    }
    stacktrace = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    if stacktrace.strip():
        attributes["exception.stacktrace"] = stacktrace
    return attributes


# ---- tags and links ----


def make_tag_attributes(tags: Iterable[str]) -> Attributes:
    """`["a", "b"]` -> `{"agentlightning.tag.0": "a", "agentlightning.tag.1": "b"}`."""
    prefix = LightningSpanAttributes.TAG.value
    return {f"{prefix}.{i}": str(tag) for i, tag in enumerate(tags)}


def make_link_attributes(links: Mapping[str, str]) -> Attributes:
    """`{key: value}` -> `agentlightning.link.<i>.key_match` / `.value_match` attributes.

    Values must be strings (ValueError naming the key otherwise), as in v0.3.
    """
    prefix = LightningSpanAttributes.LINK.value
    attributes: Attributes = {}
    for i, (key, value) in enumerate(links.items()):
        if not isinstance(value, str):  # type: ignore[redundant-expr]
            raise ValueError(f"link value for {key!r} must be a string, got {type(value).__name__}")
        attributes[f"{prefix}.{i}.{LinkAttributes.KEY_MATCH.value}"] = str(key)
        attributes[f"{prefix}.{i}.{LinkAttributes.VALUE_MATCH.value}"] = value
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


def get_span_processors(tracer_provider: TracerProvider, expected_type: type[T_Processor]) -> list[T_Processor]:
    """The span processors of `tracer_provider` that are instances of `expected_type`."""
    multi = getattr(tracer_provider, "_active_span_processor", None)
    processors = list(getattr(multi, "_span_processors", ()) or ())
    return [processor for processor in processors if isinstance(processor, expected_type)]


def get_tracer(use_active_span_processor: bool = True) -> trace_api.Tracer:
    """The `agentlightning` tracer of the global SDK provider.

    With `use_active_span_processor=False` the tracer shares the provider's resource, sampler and id
    generator but no span processor, so its spans are built and exported nowhere. Raises RuntimeError
    before a provider is set up (see `get_tracer_provider`): a tracer of the default proxy provider would
    silently drop every span.
    """
    provider = get_tracer_provider(inspect=False)
    if use_active_span_processor:
        return provider.get_tracer("agentlightning")
    detached = TracerProvider(sampler=provider.sampler, resource=provider.resource, id_generator=provider.id_generator)
    return detached.get_tracer("agentlightning")
