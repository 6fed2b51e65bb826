"""Which verl / vLLM / torch versions the VERL integration supports, checked before training starts."""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Mapping
from typing import Optional

__all__ = ["SUPPORTED_VERSIONS", "check_versions", "installed_versions"]

SUPPORTED_VERSIONS: dict[str, tuple[str, str]] = {
    # package: (minimum inclusive, maximum exclusive). verl 0.9.1 pins vLLM 0.24 and torch 2.11 for GPUs;
    # the CPU side (daemon, batches) is also tested with torch 2.13.
    "verl": ("0.9.1", "0.10"),
    "vllm": ("0.24", "0.25"),
    "torch": ("2.11", "2.14"),
}

_INSTALL_HINT = "pip install 'agentlightning[verl]'"


def _parse(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.split("+")[0].split("."):
        match = re.match(r"\d+", piece)
        if match is None:
            break
        parts.append(int(match.group()))
    return tuple(parts)


def installed_versions(packages: tuple[str, ...] = tuple(SUPPORTED_VERSIONS)) -> dict[str, Optional[str]]:
    """Installed version of each package, None when it is not installed."""
    found: dict[str, Optional[str]] = {}
    for name in packages:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def check_versions(
    installed: Optional[Mapping[str, Optional[str]]] = None, *, require_vllm: bool = True
) -> dict[str, Optional[str]]:
    """Raise RuntimeError naming every missing or unsupported package; return the versions found.

    `require_vllm=False` is for the CPU parts (config, daemon) that do not generate with vLLM.
    """
    found = dict(installed) if installed is not None else installed_versions()
    problems: list[str] = []
    for name, (low, high) in SUPPORTED_VERSIONS.items():
        version = found.get(name)
        if version is None:
            if name != "vllm" or require_vllm:
                problems.append(f"{name} is not installed (supported: >={low},<{high})")
            continue
        if not _parse(low) <= _parse(version) < _parse(high):
            problems.append(f"{name} {version} is installed, but agentlightning.verl supports {name}>={low},<{high}")
    if problems:
        raise RuntimeError(
            "VERL training cannot start: " + "; ".join(problems) + f". Install the supported set with: {_INSTALL_HINT}"
        )
    return found
