"""Turn a component spec (instance, class, factory, import path, alias or dict) into a component.

Every trainer argument (`tracer=`, `store=`, `strategy=`...) goes through `build_component`, so users can
write `strategy="shm"`, `strategy={"type": "cs", "server_port": 9999}` or pass a ready-made instance.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Optional, Union

from agentlightning.types.errors import ArgumentTypeError

__all__ = [
    "build_component",
    "load_class",
    "instantiate_component",
    "instantiate_from_spec",
    "resolve_optional_defaults",
]

ExpectedType = Union[type, tuple[type, ...]]

_DEFAULT_TYPE_ERROR = "{spec_name} must be an instance of {expected_type}, got {type_name}."
_DEFAULT_INVALID_SPEC_ERROR = (
    "Invalid {spec_name} spec of type {actual_type}; expected an instance of {expected_type}, a class, "
    "a factory, an import path / registry name, a dict with a 'type' key, or None."
)


def _type_name(expected: ExpectedType) -> str:
    if isinstance(expected, tuple):
        return " | ".join(t.__name__ for t in expected)
    return expected.__name__


def load_class(path: str) -> Any:
    """Import `package.module.Name` or `package.module:Name` and return the attribute."""
    if ":" in path:
        module_name, _, attr = path.partition(":")
    else:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{path!r} is not an import path; write it as 'package.module.ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"cannot import module {module_name!r} for {path!r}: {exc}") from exc
    try:
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj
    except AttributeError:
        raise ImportError(f"module {module_name!r} has no attribute {attr!r} (from {path!r})") from None


def _is_factory_value(value: Any) -> bool:
    """Optional-default values that are factories (called lazily) rather than values themselves."""
    return inspect.isfunction(value) or inspect.ismethod(value) or isinstance(value, functools.partial)


def resolve_optional_defaults(optional_defaults: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """Evaluate the factory-valued entries of `optional_defaults`."""
    return {k: (v() if _is_factory_value(v) else v) for k, v in (optional_defaults or {}).items()}


def _accepted_keywords(cls: Callable[..., Any]) -> tuple[set[str], bool]:
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return set(), True
    names = {
        name
        for name, p in signature.parameters.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    var_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    return names, var_keyword


def instantiate_component(
    cls: Callable[..., Any],
    provided_kwargs: Optional[Mapping[str, Any]] = None,
    optional_defaults: Optional[Mapping[str, Any]] = None,
) -> Any:
    """Call `cls(**provided_kwargs)`, adding each optional default the constructor names and the caller omitted.

    A constructor that only takes `**kwargs` gets no optional default it does not name: it would have to
    accept (or reject) arguments it never asked for, as in v0.3.
    """
    kwargs = dict(provided_kwargs or {})
    if optional_defaults:
        names, _ = _accepted_keywords(cls)
        for key, value in optional_defaults.items():
            if key in kwargs or key not in names:
                continue
            kwargs[key] = value() if _is_factory_value(value) else value
    return cls(**kwargs)


def _resolve_target(name: str, registry: Optional[Mapping[str, str]]) -> Any:
    if registry is not None and name in registry:
        return load_class(registry[name])
    if "." not in name and ":" not in name:
        known = sorted(registry) if registry else []
        raise ValueError(f"unknown component name {name!r}; use one of {known} or a full import path")
    return load_class(name)


def _names_a_component(name: Any, registry: Optional[Mapping[str, str]]) -> bool:
    return isinstance(name, str) and ((registry is not None and name in registry) or "." in name or ":" in name)


def _build_from_target(target: Any, kwargs: Mapping[str, Any], optional_defaults: Optional[Mapping[str, Any]]) -> Any:
    if inspect.isclass(target):
        return instantiate_component(target, kwargs, optional_defaults)
    if callable(target):
        return target(**kwargs)
    if kwargs:
        raise TypeError(f"{target!r} is neither a class nor a factory, so it cannot take arguments {dict(kwargs)}")
    return target


def instantiate_from_spec(
    spec: Union[str, Mapping[str, Any]],
    *,
    spec_name: str = "component",
    optional_defaults: Optional[Mapping[str, Any]] = None,
    dict_requires_type: bool = True,
    dict_default_cls: Optional[type] = None,
    registry: Optional[Mapping[str, str]] = None,
) -> Any:
    """Build a component from an import path / registry name, or from a dict `{"type": ..., **kwargs}`.

    A dict may name its class with `"name"` instead of `"type"` (v0.3): a registry name or import path
    under `"name"` is looked up the same way; any other `"name"` stays a constructor argument.
    """
    if isinstance(spec, str):
        return _build_from_target(_resolve_target(spec, registry), {}, optional_defaults)
    kwargs = dict(spec)
    type_spec = kwargs.pop("type", None)
    if type_spec is None and _names_a_component(kwargs.get("name"), registry):
        type_spec = kwargs.pop("name")
    if type_spec is None:
        if dict_default_cls is not None:
            return instantiate_component(dict_default_cls, kwargs, optional_defaults)
        if dict_requires_type:
            raise ValueError(
                f"{spec_name} dict spec needs a 'type' key (a class, import path or registry name): {spec}"
            )
        raise ValueError(f"{spec_name} dict spec has no 'type' key and there is no default class")
    if isinstance(type_spec, str):
        target = _resolve_target(type_spec, registry)
    elif callable(type_spec):
        target = type_spec
    else:
        raise ArgumentTypeError(
            f"{spec_name} dict 'type' must be a class, factory or string, got {type(type_spec).__name__}"
        )
    return _build_from_target(target, kwargs, optional_defaults)


def build_component(
    spec: Any,
    *,
    expected_type: ExpectedType,
    spec_name: str,
    default_factory: Optional[Callable[[], Any]] = None,
    allow_none: bool = False,
    optional_defaults: Optional[Mapping[str, Any]] = None,
    dict_requires_type: bool = True,
    dict_default_cls: Optional[type] = None,
    type_error_fmt: Optional[str] = None,
    invalid_spec_error_fmt: Optional[str] = None,
    registry: Optional[Mapping[str, str]] = None,
) -> Any:
    """Resolve `spec` into an instance of `expected_type`.

    Accepted specs: an instance (returned as is), a class (instantiated), a zero-argument factory
    (called), a string (import path or `registry` key), a dict (`type` plus constructor kwargs; `type`
    may be omitted when `dict_default_cls` is given), or None (`default_factory()`, or None when
    `allow_none`). `optional_defaults` are passed to constructors that accept them when the spec did not.

    Format strings may use `{spec_name}`, `{expected_type}`, `{type_name}` (what was built) and
    `{actual_type}` (type of the spec).
    """
    expected_name = _type_name(expected_type)

    def check(instance: Any) -> Any:
        if instance is None and allow_none:
            return None
        if not isinstance(instance, expected_type):
            fmt = type_error_fmt or _DEFAULT_TYPE_ERROR
            raise TypeError(
                fmt.format(
                    spec_name=spec_name,
                    expected_type=expected_name,
                    type_name=type(instance).__name__,
                    actual_type=type(spec).__name__,
                )
            )
        return instance

    if spec is None:
        if default_factory is not None:
            return check(default_factory())
        if allow_none:
            return None
        raise ValueError(f"{spec_name} is required; pass an instance of {expected_name} or a spec that builds one")
    if isinstance(spec, expected_type):
        return spec
    if inspect.isclass(spec):
        return check(instantiate_component(spec, {}, optional_defaults))
    if isinstance(spec, (str, Mapping)):
        return check(
            instantiate_from_spec(
                spec,  # type: ignore[arg-type]
                spec_name=spec_name,
                optional_defaults=optional_defaults,
                dict_requires_type=dict_requires_type,
                dict_default_cls=dict_default_cls,
                registry=registry,
            )
        )
    if callable(spec):
        return check(spec())
    fmt = invalid_spec_error_fmt or _DEFAULT_INVALID_SPEC_ERROR
    raise ArgumentTypeError(
        fmt.format(
            spec_name=spec_name,
            expected_type=expected_name,
            type_name=type(spec).__name__,
            actual_type=type(spec).__name__,
        )
    )
