"""build_component: every way a trainer component can be specified."""

from __future__ import annotations

import functools
from typing import Any, Optional

import pytest

from agentlightning.trainer import build_component
from agentlightning.trainer.init_utils import instantiate_component, instantiate_from_spec, load_class


class Widget:
    def __init__(self, size: int = 1, color: str = "red", store: Optional[str] = None) -> None:
        self.size, self.color, self.store = size, color, store


class FancyWidget(Widget):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)


class NotAWidget:
    pass


REGISTRY = {"w": f"{__name__}.Widget", "fancy": f"{__name__}:FancyWidget"}


def build(spec: Any, **kwargs: Any) -> Any:
    return build_component(spec, expected_type=Widget, spec_name="widget", **kwargs)


def test_instance_is_returned_unchanged() -> None:
    widget = Widget()
    assert build(widget, optional_defaults={"size": 5}) is widget


def test_class_is_instantiated_with_optional_defaults() -> None:
    widget = build(Widget, optional_defaults={"size": 3, "unknown": 1})
    assert widget.size == 3 and widget.color == "red"


def test_optional_default_factories_are_called_lazily() -> None:
    calls: list[int] = []

    def make_store() -> str:
        calls.append(1)
        return "lazy-store"

    widget = build(Widget, optional_defaults={"store": make_store})
    assert widget.store == "lazy-store" and calls == [1]
    build(Widget(), optional_defaults={"store": make_store})
    assert calls == [1]


def test_var_keyword_constructors_get_only_the_optional_defaults_they_name() -> None:
    # FancyWidget takes only **kwargs: it names nothing, so nothing is injected (v0.3 behaviour).
    widget = build(FancyWidget, optional_defaults={"color": "blue", "unknown": 1})
    assert isinstance(widget, FancyWidget) and widget.color == "red"

    class NamedAndKwargs(Widget):
        def __init__(self, color: str = "red", **kwargs: Any) -> None:
            super().__init__(color=color, **kwargs)

    named = build(NamedAndKwargs, optional_defaults={"color": "blue", "size": 5})
    assert (named.color, named.size) == ("blue", 1)


def test_factory_is_called() -> None:
    widget = build(lambda: Widget(size=9))
    assert widget.size == 9
    assert build(functools.partial(Widget, size=4)).size == 4


def test_string_import_path_and_registry_alias() -> None:
    assert type(build(f"{__name__}.Widget")) is Widget
    assert type(build("fancy", registry=REGISTRY)) is FancyWidget
    with pytest.raises(ValueError, match="unknown component name 'nope'"):
        build("nope", registry=REGISTRY)


def test_dict_spec_with_type_and_kwargs() -> None:
    widget = build({"type": "w", "size": 7}, registry=REGISTRY, optional_defaults={"size": 1, "color": "green"})
    assert (widget.size, widget.color) == (7, "green")
    widget = build({"type": Widget, "color": "black"})
    assert widget.color == "black"


def test_dict_spec_may_name_its_class_with_name() -> None:
    widget = build({"name": "fancy", "size": 3}, registry=REGISTRY)
    assert type(widget) is FancyWidget and widget.size == 3
    assert type(build({"name": f"{__name__}.Widget"})) is Widget
    # "type" still wins, and a "name" that names no component stays a constructor argument.

    class Named(Widget):
        def __init__(self, name: str = "", **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.name = name

    by_type = build({"type": Named, "name": "fancy"}, registry=REGISTRY)
    assert type(by_type) is Named and by_type.name == "fancy"
    default_cls = build({"name": "plain", "size": 4}, dict_requires_type=False, dict_default_cls=Named)
    assert type(default_cls) is Named and (default_cls.name, default_cls.size) == ("plain", 4)


def test_dict_spec_without_type() -> None:
    with pytest.raises(ValueError, match="needs a 'type' key"):
        build({"size": 2})
    widget = build({"size": 2}, dict_requires_type=False, dict_default_cls=FancyWidget)
    assert isinstance(widget, FancyWidget) and widget.size == 2


def test_none_uses_default_factory_or_allow_none() -> None:
    assert build(None, default_factory=lambda: Widget(size=11)).size == 11
    assert build(None, allow_none=True) is None
    with pytest.raises(ValueError, match="widget is required"):
        build(None)


def test_wrong_types_raise_type_error_with_format() -> None:
    with pytest.raises(TypeError, match="widget must be an instance of Widget, got NotAWidget"):
        build(NotAWidget)
    with pytest.raises(TypeError, match="made a NotAWidget"):
        build(lambda: NotAWidget(), type_error_fmt="factory made a {type_name}")
    with pytest.raises(TypeError, match="bad spec int for widget"):
        build(42, invalid_spec_error_fmt="bad spec {actual_type} for {spec_name}")


def test_a_spec_of_no_usable_kind_is_also_the_value_error_v03_raised() -> None:
    for spec in (42, 1.5, [Widget]):
        with pytest.raises(ValueError, match="widget") as caught:
            build(spec)
        assert isinstance(caught.value, TypeError)
    with pytest.raises(ValueError, match="'type' must be a class"):
        build({"type": 7})


def test_tuple_expected_type() -> None:
    result = build_component(NotAWidget, expected_type=(Widget, NotAWidget), spec_name="thing")
    assert isinstance(result, NotAWidget)


def test_load_class_errors_name_the_path() -> None:
    assert load_class("collections.OrderedDict").__name__ == "OrderedDict"
    with pytest.raises(ImportError, match="no_such_module"):
        load_class("no_such_module.Thing")
    with pytest.raises(ImportError, match="has no attribute 'Missing'"):
        load_class("collections.Missing")
    with pytest.raises(ValueError, match="not an import path"):
        load_class("Widget")


def test_instantiate_helpers() -> None:
    widget = instantiate_component(Widget, {"size": 2}, {"size": 100, "color": "pink"})
    assert (widget.size, widget.color) == (2, "pink")
    widget = instantiate_from_spec({"type": f"{__name__}.Widget", "color": "gold"})
    assert widget.color == "gold"
