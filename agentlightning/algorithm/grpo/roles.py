"""One LoRA adapter per agent role: which role an LLM call belongs to, and the names a role is served by.

`GRPOConfig.roles` maps a role name to a regex on agent names (`{"planner": "plan", "coder": "^coder$"}`;
a list `["planner", "coder"]` means each name matches itself exactly). A call belongs to:

1. the first role whose regex matches the call's agent name (`triplet.metadata["agent_name"]`, read by
   the adapter from the enclosing agent span, see `adapter.llm_call.agent_name_of`); else
2. the role its request named as the model, `<base>:<role>` (the role's LLM resource), so agents that
   emit no agent spans still train the adapter they called; else
3. none: the call is left out of training (counted as `triplets_without_role`).

Each role is published to runners as an `LLM` resource `<role>_llm` whose model is `<base>:<role>`; the
base (adapters disabled) stays under the usual `main_llm`.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ...types.core import Triplet

__all__ = ["ROLE_NAME_RE", "normalize_roles", "role_of_triplet", "role_resource_name", "roles_by_sample"]

ROLE_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
"""Role names become adapter names, model names (`base:role`) and resource names (`role_llm`)."""


def normalize_roles(roles: Union[Mapping[str, str], Sequence[str], None]) -> Dict[str, str]:
    """`{role: agent-name regex}` from a mapping or a list of names (each matching itself exactly).

    Raises:
        ValueError: a role name that cannot be an adapter name, or a regex that does not compile.
    """
    if not roles:
        return {}
    if isinstance(roles, str):
        raise ValueError(f"roles must be a list of names or a {{role: agent_match}} dict, got the string {roles!r}")
    patterns: Dict[str, str] = (
        dict(roles) if isinstance(roles, Mapping) else {name: f"^{re.escape(name)}$" for name in roles}
    )
    for name, pattern in patterns.items():
        if not isinstance(name, str) or not ROLE_NAME_RE.match(name):  # type: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"role name {name!r} must match {ROLE_NAME_RE.pattern} (it names a LoRA adapter)")
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise ValueError(f"roles[{name!r}] = {pattern!r} is not a valid agent_match regex: {exc}") from exc
    return patterns


def role_of_triplet(triplet: Triplet, roles: Mapping[str, str]) -> Optional[str]:
    """The role an LLM call trains (see the module docstring), or None."""
    metadata: Dict[str, Any] = triplet.metadata if isinstance(triplet.metadata, dict) else {}  # type: ignore[reportUnnecessaryIsInstance]
    agent = metadata.get("agent_name")
    if isinstance(agent, str) and agent:
        for role, pattern in roles.items():
            if re.search(pattern, agent):
                return role
    for section in ("request", "response"):
        values = metadata.get(section)
        model = values.get("model") if isinstance(values, dict) else None  # type: ignore[reportUnknownMemberType]
        if isinstance(model, str) and ":" in model:
            suffix = model.rsplit(":", 1)[1]
            if suffix in roles:
                return suffix
    return None


def role_resource_name(role: str) -> str:
    """The resource name a role's LLM is published under (`planner` -> `planner_llm`)."""
    return f"{role}_llm"


def roles_by_sample(roles: Sequence[Optional[str]]) -> Dict[Optional[str], List[int]]:
    """Indices of samples per role, in first-seen order."""
    groups: Dict[Optional[str], List[int]] = {}
    for index, role in enumerate(roles):
        groups.setdefault(role, []).append(index)
    return groups
