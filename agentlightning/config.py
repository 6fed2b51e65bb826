"""Build a command line from the constructor signatures of config classes (legacy helper).

`lightning_cli(TrainConfig, DataConfig)` exposes `--trainconfig.lr 0.1 --dataconfig.path x.jsonl` and returns
the instances. Supported parameter types: bool, int, float, str, Optional/Literal/List of those; anything
else is passed through as a string.
"""

from __future__ import annotations

import argparse
import inspect
import types
import typing
from collections.abc import Sequence
from typing import Any, Literal, Optional, Union, get_args, get_origin

__all__ = ["lightning_cli"]

_SIMPLE_TYPES = (bool, int, float, str)


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _argparse_kwargs(annotation: Any, default: Any) -> dict[str, Any]:
    """argparse keyword arguments for one parameter."""
    inner, _ = _unwrap_optional(annotation)
    origin = get_origin(inner)
    if inner is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin is Literal:
        choices = list(get_args(inner))
        return {"choices": choices, "type": type(choices[0]) if choices else str}
    if origin in (list, tuple, Sequence, typing.Sequence, typing.List):  # noqa: UP006
        item_args = get_args(inner)
        item = item_args[0] if item_args else str
        return {"nargs": "*", "type": item if item in _SIMPLE_TYPES and item is not bool else str}
    if inner in _SIMPLE_TYPES:
        return {"type": inner}
    if default is not inspect.Parameter.empty and default is not None and type(default) in _SIMPLE_TYPES:
        return {"type": type(default)} if type(default) is not bool else {"action": argparse.BooleanOptionalAction}
    return {"type": str}


def _add_class_arguments(parser: argparse.ArgumentParser, cls: type, prefix: str) -> list[tuple[str, str]]:
    """Add one argument group for `cls`; return (parameter name, argparse dest) pairs."""
    group = parser.add_argument_group(cls.__name__, inspect.getdoc(cls) or None)
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:
        hints = {}
    params: list[tuple[str, str]] = []
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        annotation = hints.get(name, param.annotation)
        if annotation is inspect.Parameter.empty:
            annotation = type(param.default) if param.default not in (inspect.Parameter.empty, None) else str
        dest = f"{prefix}__{name}"
        flags = [f"--{prefix}.{name}"]
        if "_" in name:
            flags.append(f"--{prefix}.{name.replace('_', '-')}")
        kwargs = _argparse_kwargs(annotation, param.default)
        if param.default is inspect.Parameter.empty:
            kwargs["required"] = True
        else:
            kwargs["default"] = param.default
        group.add_argument(
            *flags, dest=dest, help=f"{cls.__name__}.{name} ({kwargs.get('default', 'required')})", **kwargs
        )
        params.append((name, dest))
    return params


def lightning_cli(*classes: type, args: Optional[Sequence[str]] = None) -> Any:
    """Parse the command line into one instance per class (a single instance when one class is given).

    Args:
        classes: config classes whose `__init__` parameters become `--<classname>.<param>` options.
        args: argument list to parse instead of `sys.argv[1:]`.
    """
    if not classes:
        raise ValueError("lightning_cli needs at least one config class, e.g. lightning_cli(MyConfig)")
    parser = argparse.ArgumentParser(description="agentlightning configuration")
    layout: list[tuple[type, list[tuple[str, str]]]] = []
    seen: set[str] = set()
    for cls in classes:
        prefix = cls.__name__.lower()
        if prefix in seen:
            raise ValueError(f"config class {cls.__name__!r} given twice; pass each class once")
        seen.add(prefix)
        layout.append((cls, _add_class_arguments(parser, cls, prefix)))
    namespace = parser.parse_args(None if args is None else list(args))
    instances = [cls(**{name: getattr(namespace, dest) for name, dest in params}) for cls, params in layout]
    return instances[0] if len(instances) == 1 else tuple(instances)
