"""`agentlightning.__all__` is one explicit list: it names exactly what the subpackages make public, every
name resolves, and everything the API reference (docs/reference/api.md) documents is among them."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import agentlightning

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "api.md"

# Top-level names that are factories loading an optional extra, so not the documented class itself.
FACTORIES = {"GEPA"}


def _subpackage_names() -> set[str]:
    names: set[str] = set()
    for subpackage in agentlightning._SUBPACKAGES:  # pyright: ignore[reportPrivateUsage]
        names.update(importlib.import_module(f"agentlightning.{subpackage}").__all__)
    return names


def test_all_is_a_list_without_repeats() -> None:
    assert isinstance(agentlightning.__all__, list)
    assert len(agentlightning.__all__) == len(set(agentlightning.__all__))


def test_all_names_what_the_subpackages_and_the_explicit_homes_make_public() -> None:
    explicit = set(agentlightning._EXPLICIT)  # pyright: ignore[reportPrivateUsage]
    assert set(agentlightning.__all__) == _subpackage_names() | explicit | {"__version__"}


def test_every_name_of_all_resolves() -> None:
    missing = [name for name in agentlightning.__all__ if not hasattr(agentlightning, name)]
    assert missing == []


def test_a_name_outside_all_is_an_attribute_error() -> None:
    try:
        agentlightning.not_a_public_name  # noqa: B018  # pyright: ignore[reportAttributeAccessIssue]
    except AttributeError as exc:
        assert "not_a_public_name" in str(exc)
    else:
        raise AssertionError("agentlightning.not_a_public_name resolved")


def test_everything_the_api_reference_documents_is_public_at_the_top_level() -> None:
    documented = re.findall(r"^::: (agentlightning(?:\.\w+)+)", REFERENCE.read_text(), flags=re.M)
    assert len(documented) > 20, "the reference lost its entries"
    for path in documented:
        module_name, name = path.rsplit(".", 1)
        assert name in agentlightning.__all__, f"{path} is documented but not in agentlightning.__all__"
        if name not in FACTORIES:
            assert getattr(agentlightning, name) is getattr(importlib.import_module(module_name), name), path
