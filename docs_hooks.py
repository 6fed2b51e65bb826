"""MkDocs hooks: generate the CLI and REST reference pages from the code at build time.

Pages that are in `docs/` but not in the `nav` of mkdocs.yml (pages other work adds) are placed by `on_nav`:
into the section named in `EXTRA_PAGE_SECTIONS`, else under "More", so a new page is never hidden.

A page containing `<!-- agl:cli-reference -->` gets the `--help` text of every `agl` subcommand (from their
argparse parsers); `<!-- agl:rest-reference -->` gets the store server's routes from its OpenAPI document.
Nothing is fetched from the network.
"""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any

EXTRA_PAGE_SECTIONS = {
    "harnessed-agents.md": "Guides",
    "capture.md": "Guides",
    "llm-proxy.md": "Guides",
    "scaling.md": "Guides",
    "multi-node.md": "Guides",
    "store-http.md": "Guides",
    "store-guarantees.md": "Guides",
    "differences-from-v0.3.md": "Reference",
}
"""Pages expected from parallel work, and the nav section each belongs in."""

CLI_MARKER = "<!-- agl:cli-reference -->"
REST_MARKER = "<!-- agl:rest-reference -->"
_HELP_COLUMNS = "100"


def cli_reference() -> str:
    """Markdown with one section per `agl` subcommand and its help text."""
    from agentlightning.cli import SUBCOMMANDS, _usage  # pyright: ignore[reportPrivateUsage]

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _HELP_COLUMNS  # argparse wraps help at the terminal width
    try:
        parts = ["## agl", "", "```text", _usage(), "```", ""]
        for name, (module_name, description) in SUBCOMMANDS.items():
            module = importlib.import_module(module_name)
            build_parser = getattr(module, "build_parser", None)
            if callable(build_parser):
                parser = build_parser()
                assert isinstance(parser, argparse.ArgumentParser)
                text = parser.format_help()
            else:
                text = str(getattr(module, "USAGE", ""))
            parts += [f"## agl {name}", "", description, "", "```text", text.rstrip(), "```", ""]
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(parts)


def _parameters(operation: dict[str, Any]) -> str:
    names = []
    for parameter in operation.get("parameters", []):
        if parameter.get("in") == "path":
            continue
        required = "" if parameter.get("required") else "?"
        names.append(f"`{parameter['name']}{required}`")
    return ", ".join(names)


def _group(path: str) -> str:
    pieces = [p for p in path.split("/") if p]
    if pieces[:2] == ["v1", "agl"] and len(pieces) > 2:
        return pieces[3] if pieces[2] in ("queues", "waits") and len(pieces) > 3 else pieces[2]
    return "OpenTelemetry (OTLP/HTTP)"


def rest_reference() -> str:
    """Markdown tables of the store server's routes, grouped by resource, from its OpenAPI document."""
    from agentlightning.store import InMemoryLightningStore, LightningStoreServer

    app = LightningStoreServer(InMemoryLightningStore(), port=0).app
    assert app is not None
    spec = app.openapi()
    groups: dict[str, list[str]] = {}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            summary = operation.get("summary", "")
            description = " ".join((operation.get("description") or "").split())
            text = f"{summary}. {description}" if description else summary
            row = f"| {method.upper()} | `{path}` | {text.replace('|', '/')} | {_parameters(operation)} |"
            groups.setdefault(_group(path), []).append(row)
    parts = [f"Generated from the OpenAPI document of `{spec['info']['title']}` {spec['info']['version']}.", ""]
    for group in sorted(groups, key=lambda g: (g.startswith("OpenTelemetry"), g)):
        parts += [f"## {group}", "", "| Method | Path | What | Query parameters |", "|---|---|---|---|"]
        parts += groups[group]
        parts.append("")
    return "\n".join(parts)


def on_page_markdown(markdown: str, **_: Any) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if REST_MARKER in markdown:
        markdown = markdown.replace(REST_MARKER, rest_reference())
    return markdown


def on_nav(nav: Any, *, config: Any, files: Any) -> Any:
    from mkdocs.structure.nav import Section
    from mkdocs.structure.pages import Page

    listed = {page.file.src_uri for page in nav.pages}
    extra = [f for f in files.documentation_pages() if f.src_uri not in listed]
    if not extra:
        return nav
    sections = {item.title: item for item in nav.items if isinstance(item, Section)}
    for file in sorted(extra, key=lambda f: f.src_uri):
        title = EXTRA_PAGE_SECTIONS.get(file.src_uri, "More")
        section = sections.get(title)
        if section is None:
            section = sections[title] = Section(title, [])
            nav.items.insert(len(nav.items) - 1, section)  # before the changelog
        page = Page(None, file, config)
        page.parent = section
        section.children.append(page)
        nav.pages.append(page)
    return nav
