"""Weights fingerprints: what a policy server serves, in a form a learner can check against its own weights.

A fingerprint holds the weights version, the LoRA adapters served, and exact checksums of a few *watched*
tensors: in every group (one per layer and adapter; the tensors outside layers are all watched) `per_layer`
of them, spread evenly by name and shifted by one with every weights version so that successive syncs cover
every tensor (0: watch all, every time). A checksum is computed on the tensor's device from its raw bits,
each weighted by its position: it changes when a value changes or moves, and is the same on CPU and GPU.
The learner builds the same fingerprint from the weights it trained (cast to the dtypes the server
reports) and compares the two (`compare_fingerprints`).

The view both sides fingerprint is what the server computes with: without adapters, the plain model's
state dict (a peft model's LoRA merged in, `weights.merged_state_dict`); with adapters, the peft model's
parameters (the frozen base and each adapter's `lora_*` tensors). A CPU server that decodes from oneDNN-prepacked
copies of its weights (`fused.py`) reports those copies, read back dense, for the tensors they serve: a copy
that missed an update differs from the parameter it was packed from.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from pydantic import BaseModel

if TYPE_CHECKING:
    import torch
    from fastapi import FastAPI

    from .engine import PolicyEngine

__all__ = [
    "FINGERPRINT_PATH",
    "TensorChecksum",
    "WeightsFingerprint",
    "add_fingerprint_route",
    "compare_fingerprints",
    "fingerprint_of",
    "tensor_checksum",
    "watched_names",
]

FINGERPRINT_PATH = "/v1/weights/fingerprint"
"""`GET` it on a policy server for the fingerprint of the weights it serves (`?per_layer=N`)."""

_MODULUS = 2_147_483_647  # 2**31 - 1: an element's term stays below 2**31, so int64 sums of < 2**32 never overflow
_POSITION_CYCLE = 65_521
_CHUNK = 64 * _POSITION_CYCLE  # about 4M elements a pass
_LAYER_RE = re.compile(r"\.(\d+)\.")
_ADAPTER_RE = re.compile(r"\.lora_[A-Za-z_]+\.([A-Za-z0-9_-]+)\.")
_BITS_DTYPES = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


class TensorChecksum(BaseModel):
    """One watched tensor: its dtype, shape and position-weighted checksum of its bits."""

    dtype: str
    shape: List[int]
    checksum: int


class WeightsFingerprint(BaseModel):
    """What a policy server serves (or what a learner expects it to): version, adapters, watched tensors."""

    version: int
    adapters: List[str]
    per_layer: int
    tensors: Dict[str, TensorChecksum]
    device: str = "cpu"


def tensor_checksum(tensor: torch.Tensor) -> int:
    """An exact checksum of `tensor`'s bits, computed on its device: sum of bits x (position mod 65,521 + 1),
    mod 2**31 - 1 (8-byte bits reduced mod 2**31 - 1 first)."""
    import torch

    flat = tensor.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    bits = flat.view(getattr(torch, _BITS_DTYPES[flat.element_size()]))
    weights = _position_weights(flat.device)
    total = torch.zeros((), dtype=torch.int64, device=flat.device)
    for start in range(0, bits.numel(), _CHUNK):
        chunk = bits[start : start + _CHUNK].to(torch.int64)
        if flat.element_size() == 8:
            chunk = torch.remainder(chunk, _MODULUS)
        chunk.mul_(weights[: chunk.numel()]).remainder_(_MODULUS)  # in place: one int64 copy of the chunk
        total = torch.remainder(total + chunk.sum(), _MODULUS)
    return int(total.item())


@functools.lru_cache(maxsize=8)
def _position_weights(device: torch.device) -> torch.Tensor:
    """(position mod the cycle) + 1 for one chunk; a chunk is a whole number of cycles, so every chunk's
    positions weigh the same (17 MB per device, computed once)."""
    import torch

    positions = torch.arange(_CHUNK, dtype=torch.int64, device=device)
    return (torch.remainder(positions, _POSITION_CYCLE) + 1).to(torch.int32)


def _group(name: str) -> Tuple[str, str]:
    adapter = _ADAPTER_RE.search(name)
    layer = _LAYER_RE.search(name)
    return (adapter.group(1) if adapter else "", layer.group(1) if layer else "")


def watched_names(names: Sequence[str], per_layer: int = 2, rotation: int = 0) -> List[str]:
    """The tensors a fingerprint checks: `per_layer` of each (adapter, layer) group, spread evenly by name.

    `rotation` (the weights version) shifts the picks by one tensor per version, so successive syncs watch
    every tensor of a layer in turn. Tensors outside any layer (embeddings, the final norm, the head) are
    all watched; `per_layer=0` watches every tensor.
    """
    if per_layer < 0:
        raise ValueError(f"per_layer must be >= 0 (0: every tensor), got {per_layer}")
    groups: Dict[Tuple[str, str], List[str]] = defaultdict(list)
    for name in sorted(names):
        groups[_group(name)].append(name)
    chosen: List[str] = []
    for (_adapter, layer), members in sorted(groups.items()):
        count = len(members)
        if per_layer == 0 or not layer or count <= per_layer:
            chosen.extend(members)
            continue
        picks = {(i * count // per_layer + rotation) % count for i in range(per_layer)}
        chosen.extend(members[i] for i in sorted(picks))
    return chosen


def served_view(module: torch.nn.Module, adapters: Sequence[str]) -> Dict[str, torch.Tensor]:
    """The named tensors a server with `adapters` computes with (see the module docstring)."""
    from .weights import merged_state_dict

    if adapters:
        return {name: p.detach() for name, p in module.named_parameters()}
    return merged_state_dict(module)


def fingerprint_of(
    module: torch.nn.Module,
    *,
    version: int,
    adapters: Sequence[str] = (),
    per_layer: int = 2,
    dtypes: Optional[Mapping[str, str]] = None,
    packed: Optional[Mapping[str, Callable[[], torch.Tensor]]] = None,
) -> WeightsFingerprint:
    """The fingerprint of `module` as served with `adapters`; `dtypes` casts tensors first (a learner
    matching a server that serves another dtype, e.g. bfloat16 from float32 weights); `packed`: the
    tensors a server computes with in place of some parameters (`PolicyEngine.packed_weights`)."""
    import torch

    view = served_view(module, adapters)
    tensors: Dict[str, TensorChecksum] = {}
    device = "cpu"
    with torch.no_grad():
        for name in watched_names(list(view), per_layer, rotation=version):
            tensor = packed[name]() if packed is not None and name in packed else view[name]
            device = str(tensor.device)
            wanted = (dtypes or {}).get(name)
            if wanted is not None and wanted != _dtype_name(tensor):
                tensor = tensor.to(getattr(torch, wanted))
            tensors[name] = TensorChecksum(
                dtype=_dtype_name(tensor), shape=list(tensor.shape), checksum=tensor_checksum(tensor)
            )
    return WeightsFingerprint(
        version=version, adapters=list(adapters), per_layer=per_layer, tensors=tensors, device=device
    )


def _dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def compare_fingerprints(expected: WeightsFingerprint, served: WeightsFingerprint) -> List[str]:
    """Every difference between what a learner expects and what a server serves, the tensors named; [] if equal."""
    problems: List[str] = []
    if served.version != expected.version:
        problems.append(f"weights version: served weights-v{served.version}, expected weights-v{expected.version}")
    if sorted(served.adapters) != sorted(expected.adapters):
        problems.append(f"adapters: served {sorted(served.adapters)}, expected {sorted(expected.adapters)}")
    for name in sorted(set(expected.tensors) | set(served.tensors)):
        mine, theirs = expected.tensors.get(name), served.tensors.get(name)
        if theirs is None:
            problems.append(f"tensor {name!r}: not served")
        elif mine is None:
            problems.append(f"tensor {name!r}: served but the learner has no such tensor")
        elif mine.shape != theirs.shape or mine.dtype != theirs.dtype:
            problems.append(f"tensor {name!r}: served {theirs.dtype}{theirs.shape}, expected {mine.dtype}{mine.shape}")
        elif mine.checksum != theirs.checksum:
            problems.append(f"tensor {name!r}: served checksum {theirs.checksum}, expected {mine.checksum}")
    return problems


def add_fingerprint_route(app: FastAPI, engine: PolicyEngine) -> None:
    """`GET /v1/weights/fingerprint?per_layer=N` on a policy server's app: the fingerprint of the weights
    `engine` serves right now. It waits for the decode step in flight (the weights lock), so it never
    reads weights mid-swap.
    """
    import asyncio

    from fastapi.responses import JSONResponse

    def compute(per_layer: int) -> WeightsFingerprint:
        with engine.exclusive():
            return fingerprint_of(
                engine.model,
                version=engine.weights_version,
                adapters=engine.adapters,
                per_layer=per_layer,
                packed=engine.packed_weights(),
            )

    @app.get(FINGERPRINT_PATH, response_model=None)
    async def _fingerprint(per_layer: int = 2) -> Any:  # type: ignore[reportUnusedFunction]
        from .protocol import openai_error

        if per_layer < 0:
            message = f"per_layer must be >= 0 (0: every tensor), got {per_layer}"
            return JSONResponse(status_code=400, content=openai_error(message, param="per_layer"))
        fingerprint = await asyncio.to_thread(compute, per_layer)
        return fingerprint.model_dump()
