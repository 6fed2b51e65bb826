"""Decoder layers of Llama/SmolLM2 and Qwen2/2.5/3 models with fused projections, for serving.

`fuse_layers(model)` stores each layer's q/k/v weights as one tensor (and gate/up as one) and makes the
`q_proj`/`k_proj`/`v_proj` (`gate_proj`/`up_proj`) weights views into it: an in-place `copy_` into those
parameters (`PolicyEngine.update_weights`, an optimizer step in shared-model mode) updates the fused
matrices too, and the parameters keep their identity (optimizer state stays attached). Each layer then
runs, when no gradient is recorded (serving), as two pure functions of tensors, `pre_attention` (norm,
one q/k/v matmul, rotary) and `post_attention` (output projection, residual, norm, one gate/up matmul,
activation, down projection, residual), with the KV-cache write and the attention between them. Those
two functions are what `regional.py` compiles once and reuses for every layer. With gradients enabled
(training), every layer runs the model's own code.

Models that do not fit (a peft/LoRA wrapper, another architecture, an activation other than SiLU, a
layer whose fused output differs from its own) keep their own code; the reason is logged and kept in
`FusedLayers.reason`.
"""

from __future__ import annotations

import functools
import logging
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

# At module level, not in the functions: torch.compile traces them, and an import inside one calls
# builtins.__import__, which instrumentation may have replaced (agentops' hook broke regional compilation).
import torch
import torch.nn.functional as F

__all__ = ["FusedLayers", "fuse_layers", "post_attention", "pre_attention"]

logger = logging.getLogger(__name__)

_FAMILIES = {
    "LlamaDecoderLayer": ("LlamaAttention", "LlamaMLP"),
    "Qwen2DecoderLayer": ("Qwen2Attention", "Qwen2MLP"),
    "Qwen3DecoderLayer": ("Qwen3Attention", "Qwen3MLP"),
}
_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """`F.linear`, or oneDNN's matmul when `weight` is prepacked (`pack_weight`)."""
    if weight.is_mkldnn:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return torch.nn.functional.linear(x, weight, bias)


def pack_weight(weight: torch.Tensor, batch_hint: int) -> torch.Tensor:
    """`weight` reordered into oneDNN's blocked layout (a copy): on CPU, 1.5x (one row) to 2.8x (eight rows)
    faster matrix products than `F.linear` for SmolLM2's shapes, the same values up to float rounding."""
    import torch

    with torch.inference_mode(False), torch.no_grad():
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), batch_hint)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' RMSNorm (Llama, Qwen2, Qwen3), op for op."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def pre_attention(
    hidden: torch.Tensor,
    norm_weight: torch.Tensor,
    qkv_weight: torch.Tensor,
    qkv_bias: Optional[torch.Tensor],
    q_norm: Optional[torch.Tensor],
    k_norm: Optional[torch.Tensor],
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
    heads: int,
    kv_heads: int,
    head_dim: int,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Input norm, one q/k/v matmul, (Qwen3) per-head q/k norms, rotary: `[batch, heads, length, head_dim]`."""
    batch, length = hidden.shape[0], hidden.shape[1]
    qkv = linear(rms_norm(hidden, norm_weight, eps), qkv_weight, qkv_bias)
    q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    q = q.reshape(batch, length, heads, head_dim)
    k = k.reshape(batch, length, kv_heads, head_dim)
    v = v.reshape(batch, length, kv_heads, head_dim)
    if q_norm is not None and k_norm is not None:
        q, k = rms_norm(q, q_norm, eps), rms_norm(k, k_norm, eps)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    q = (q * cos) + (_rotate_half(q) * sin)
    k = (k * cos) + (_rotate_half(k) * sin)
    return q, k, v


def post_attention(
    attn: torch.Tensor,
    residual: torch.Tensor,
    o_weight: torch.Tensor,
    o_bias: Optional[torch.Tensor],
    norm_weight: torch.Tensor,
    gate_up_weight: torch.Tensor,
    gate_up_bias: Optional[torch.Tensor],
    down_weight: torch.Tensor,
    down_bias: Optional[torch.Tensor],
    eps: float,
) -> torch.Tensor:
    """Output projection and residual, post-attention norm, one gate/up matmul, SiLU, down projection, residual."""
    batch, length = residual.shape[0], residual.shape[1]
    hidden = residual + linear(attn.reshape(batch, length, -1), o_weight, o_bias)
    gate, up = linear(rms_norm(hidden, norm_weight, eps), gate_up_weight, gate_up_bias).chunk(2, dim=-1)
    return hidden + linear(F.silu(gate) * up, down_weight, down_bias)


@dataclass
class _Fused:
    """One weight (and bias) tensor holding several linears' weights end to end (views point into it)."""

    linears: Tuple[Any, ...]
    weight: Any = None
    bias: Any = None

    def fuse(self) -> None:
        import torch

        with torch.inference_mode(False), torch.no_grad():  # plain tensors, updatable outside inference mode
            self.weight = torch.cat([m.weight.detach() for m in self.linears], dim=0)
            rows = [m.weight.shape[0] for m in self.linears]
            for module, piece in zip(self.linears, self.weight.split(rows, dim=0), strict=True):
                module.weight.data = piece
            if self.linears[0].bias is not None:
                self.bias = torch.cat([m.bias.detach() for m in self.linears], dim=0)
                for module, piece in zip(self.linears, self.bias.split(rows, dim=0), strict=True):
                    module.bias.data = piece

    def intact(self) -> bool:
        """Whether every linear's weight (and bias) still lives inside the fused tensors."""
        return _inside(self.weight, [m.weight for m in self.linears]) and (
            self.bias is None or _inside(self.bias, [m.bias for m in self.linears])
        )


def _inside(fused: Any, parts: Sequence[Any]) -> bool:
    start, step = fused.data_ptr(), fused.element_size()
    offset = 0
    for part in parts:
        if part.data_ptr() != start + offset * step or part.dtype != fused.dtype or part.device != fused.device:
            return False
        offset += part.numel()
    return True


class _Layer:
    """One decoder layer's fused tensors and the forward that uses them."""

    def __init__(self, layer: Any) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.layer, self.attn = layer, attn
        self.qkv = _Fused((attn.q_proj, attn.k_proj, attn.v_proj))
        self.gate_up = _Fused((mlp.gate_proj, mlp.up_proj))
        config = attn.config
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(attn.head_dim)
        self.eps = float(layer.input_layernorm.variance_epsilon)
        self.has_qk_norm = hasattr(attn, "q_norm") and hasattr(attn, "k_norm")
        self.original = layer.forward
        module = sys.modules[type(attn).__module__]
        self.attention_functions: Any = module.ALL_ATTENTION_FUNCTIONS
        self.eager_attention: Callable[..., Any] = module.eager_attention_forward

        self.packed: Optional[Dict[str, Any]] = None

    def fuse(self) -> None:
        self.qkv.fuse()
        self.gate_up.fuse()

    def dense(self) -> Dict[str, Any]:
        mlp = self.layer.mlp
        weights = {"qkv": self.qkv.weight, "o": self.attn.o_proj.weight, "gate_up": self.gate_up.weight}
        return {**weights, "down": mlp.down_proj.weight}

    def weights(self) -> Dict[str, Any]:
        return self.packed if self.packed is not None else self.dense()

    def parts(self) -> Dict[str, Tuple[Any, ...]]:
        """The linears behind each of `dense()`'s matrices, in row order."""
        mlp = self.layer.mlp
        return {
            "qkv": self.qkv.linears,
            "o": (self.attn.o_proj,),
            "gate_up": self.gate_up.linears,
            "down": (mlp.down_proj,),
        }

    def intact(self) -> bool:
        return self.qkv.intact() and self.gate_up.intact()

    def install(self, plan: FusedLayers) -> None:
        def forward(layer: Any, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
            if layer is not self.layer:  # a deep copy of the model: its own weights, its own code
                return type(layer).forward(layer, hidden_states, *args, **kwargs)
            return plan.layer_forward(self, hidden_states, *args, **kwargs)

        self.layer.forward = types.MethodType(forward, self.layer)

    def uninstall(self) -> None:
        self.layer.__dict__.pop("forward", None)

    def pre_arguments(self, hidden: Any, cos: Any, sin: Any, weights: Dict[str, Any]) -> Tuple[Any, ...]:
        attn, layer = self.attn, self.layer
        q_norm = attn.q_norm.weight if self.has_qk_norm else None
        k_norm = attn.k_norm.weight if self.has_qk_norm else None
        norm = layer.input_layernorm.weight
        return (hidden, norm, weights["qkv"], self.qkv.bias, q_norm, k_norm, cos, sin, self.eps)

    def post_arguments(self, out: Any, residual: Any, weights: Dict[str, Any]) -> Tuple[Any, ...]:
        layer, o_bias = self.layer, self.attn.o_proj.bias
        norm, down_bias = layer.post_attention_layernorm.weight, layer.mlp.down_proj.bias
        gate_up = (weights["gate_up"], self.gate_up.bias)
        return (out, residual, weights["o"], o_bias, norm, *gate_up, weights["down"], down_bias, self.eps)

    def attention(self, q: Any, k: Any, v: Any, mask: Any, cache: Any, kwargs: Dict[str, Any]) -> Any:
        attn = self.attn
        if cache is not None:
            k, v = cache.update(k, v, attn.layer_idx, kwargs=kwargs)
        interface = self.attention_functions.get_interface(attn.config._attn_implementation, self.eager_attention)
        extra = {"sliding_window": attn.sliding_window} if hasattr(attn, "sliding_window") else {}
        out, _ = interface(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling, **extra, **kwargs)
        return out


class _Head:
    """The output projection (lm_head) served from a prepacked copy of its weight."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.packed: Any = None

    def install(self) -> None:
        def forward(module: Any, x: Any) -> Any:
            import torch

            if module is not self.module or self.packed is None or torch.is_grad_enabled():
                return type(module).forward(module, x)
            return linear(x, self.packed, module.bias)

        self.module.forward = types.MethodType(forward, self.module)

    def uninstall(self) -> None:
        self.module.__dict__.pop("forward", None)
        self.packed = None


class FusedLayers:
    """The fused decoder layers of a model (`fuse_layers`); `reason` says why there are none.

    `pack(batch_hint)` (CPU) serves every matrix product from oneDNN-prepacked copies of the weights;
    copies do not follow in-place updates, so `refresh()`, which `SlotModel.weights_changed` (and so
    `PolicyEngine.update_weights`) calls, packs them again.
    """

    def __init__(self, layers: Sequence[_Layer], reason: Optional[str] = None, head: Optional[_Head] = None) -> None:
        self.layers: List[_Layer] = list(layers)
        self.reason = reason
        self.head = head
        self.pre: Callable[..., Any] = pre_attention
        self.post: Callable[..., Any] = post_attention
        self.calls = 0
        self.batch_hint: Optional[int] = None

    @property
    def active(self) -> bool:
        return bool(self.layers)

    @property
    def packed(self) -> bool:
        return self.batch_hint is not None

    def pack(self, batch_hint: int) -> None:
        """Serve from oneDNN-prepacked weights (CPU; `pack_weight`), packed now and at every `refresh`."""
        self.batch_hint = batch_hint
        for layer in self.layers:
            layer.packed = {name: pack_weight(w, batch_hint) for name, w in layer.dense().items()}
        if self.head is not None:
            self.head.packed = pack_weight(self.head.module.weight, batch_hint)
            self.head.install()

    def refresh(self) -> int:
        """Fuse again every layer whose weights moved to new storage (a `load_state_dict(assign=True)`, a
        dtype change), and pack again when packed; returns how many layers were fused again. Without
        packing, an in-place copy keeps the layers fused and needs nothing."""
        moved = [layer for layer in self.layers if not layer.intact()]
        for layer in moved:
            layer.fuse()
        if moved:
            logger.info("fused projections: %d layers fused again (their weights had moved)", len(moved))
        if self.batch_hint is not None:
            self.pack(self.batch_hint)
        return len(moved)

    def unpack(self) -> bool:
        """Drop the prepacked copies, whose memory is then free (for a weight update), and serve the dense
        weights until `refresh` packs again; returns whether there were copies to drop."""
        dropped = any(layer.packed is not None for layer in self.layers)
        for layer in self.layers:
            layer.packed = None
        if self.head is not None and self.head.packed is not None:
            self.head.packed, dropped = None, True
        return dropped

    def served_tensors(self, model: Any) -> Dict[str, Callable[[], Any]]:
        """What the prepacked copies serve, by `model`'s parameter name: each entry reads the rows of its
        weight back from the copy, dense (the weight fingerprint checks them; a copy that missed an update
        differs from the parameter). Empty when nothing is packed."""
        names = {id(module): name for name, module in model.named_modules()}
        served: Dict[str, Callable[[], Any]] = {}
        for layer in self.layers:
            if layer.packed is None:
                continue
            for key, linears in layer.parts().items():
                start = 0
                for module in linears:
                    rows = int(module.weight.shape[0])
                    if id(module) in names:
                        served[f"{names[id(module)]}.weight"] = functools.partial(
                            _packed_rows, layer.packed[key], start, start + rows
                        )
                    start += rows
        head = self.head
        if head is not None and head.packed is not None and id(head.module) in names:
            served[f"{names[id(head.module)]}.weight"] = functools.partial(
                _packed_rows, head.packed, 0, int(head.module.weight.shape[0])
            )
        return served

    def restore(self) -> None:
        """Give every layer its own forward back (the weights stay views; they serve the same values)."""
        for layer in self.layers:
            layer.uninstall()
            layer.packed = None
        if self.head is not None:
            self.head.uninstall()
        self.layers, self.batch_hint = [], None

    def layer_forward(self, entry: _Layer, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        if torch.is_grad_enabled() or args or entry.layer.training:
            return entry.original(hidden_states, *args, **kwargs)
        self.calls += 1
        cache = kwargs.pop("cache", None)
        legacy = kwargs.pop("past_key_values", None)
        cache = cache if cache is not None else legacy
        mask = kwargs.pop("attention_mask", None)
        cos, sin = kwargs.pop("position_embeddings")
        for unused in ("position_ids", "use_cache", "cache_position"):
            kwargs.pop(unused, None)
        weights = entry.weights()
        shape = (entry.heads, entry.kv_heads, entry.head_dim)
        q, k, v = self.pre(*entry.pre_arguments(hidden_states, cos, sin, weights), *shape)
        out = entry.attention(q, k, v, mask, cache, kwargs)
        return self.post(*entry.post_arguments(out, hidden_states, weights))


def _packed_rows(packed: Any, start: int, stop: int) -> Any:
    return packed.to_dense()[start:stop]


def _decoder_layers(model: Any) -> Tuple[List[Any], Optional[str]]:
    """The decoder layers to fuse, or the reason there are none."""
    import torch

    if hasattr(model, "get_base_model") or any(type(m).__module__.startswith("peft.") for m in model.modules()):
        return [], "a peft (LoRA) model: its adapters wrap the projections"
    layers = [m for m in model.modules() if type(m).__name__ in _FAMILIES]
    if not layers:
        return [], f"{type(model).__name__} has no Llama/Qwen2/Qwen3 decoder layers"
    for layer in layers:
        attention, mlp = _FAMILIES[type(layer).__name__]
        attn: Any = getattr(layer, "self_attn", None)
        ff: Any = getattr(layer, "mlp", None)
        if type(attn).__name__ != attention or type(ff).__name__ != mlp:
            return [], f"{type(layer).__name__} holds {type(attn).__name__}/{type(ff).__name__}, not {attention}/{mlp}"
        names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
        linears: List[Any] = [getattr(attn if i < 4 else ff, n, None) for i, n in enumerate(names)]
        if any(type(m) is not torch.nn.Linear for m in linears):
            return [], "a projection is not a plain torch.nn.Linear (quantized or wrapped)"
        if len({(m.weight.dtype, m.weight.device) for m in linears}) != 1:
            return [], "the projections differ in dtype or device"
        if (attn.q_proj.bias is None) != (attn.v_proj.bias is None) or (ff.gate_proj.bias is None) != (
            ff.up_proj.bias is None
        ):
            return [], "q/k/v (or gate/up) do not all have a bias or all lack one"
        norms = [type(layer.input_layernorm).__name__, type(layer.post_attention_layernorm).__name__]
        if any(n not in _NORMS for n in norms):
            return [], f"unknown norms {norms}"
        if str(getattr(attn.config, "hidden_act", "silu")) not in ("silu", "swish"):
            return [], f"activation {attn.config.hidden_act!r} (the fused MLP computes SiLU)"
        module = sys.modules[type(attn).__module__]
        if not hasattr(module, "ALL_ATTENTION_FUNCTIONS") or not hasattr(module, "eager_attention_forward"):
            return [], f"{module.__name__} lacks ALL_ATTENTION_FUNCTIONS/eager_attention_forward"
    return layers, None


def _check(plan: FusedLayers, entry: _Layer) -> Optional[str]:
    """Run one layer its own way and fused on a random input; a reason when the two differ."""
    import torch

    layer = entry.layer
    parameter = layer.input_layernorm.weight
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn((2, 3, parameter.shape[0]), generator=generator).to(parameter.device, parameter.dtype)
    angles = torch.randn((2, 3, entry.head_dim), generator=generator).to(parameter.device, parameter.dtype)
    embeddings = (angles.cos(), angles.sin())
    with torch.no_grad():
        try:
            want = entry.original(hidden, attention_mask=None, position_embeddings=embeddings)
            got = plan.layer_forward(entry, hidden, attention_mask=None, position_embeddings=embeddings)
        except Exception as exc:  # a transformers version whose layer takes other arguments
            return f"the fused layer failed on a test input ({type(exc).__name__}: {exc})"
    want = want[0] if isinstance(want, tuple) else want
    tolerance = 1e-4 if parameter.dtype == torch.float32 else 3e-2
    error = float((want.float() - got.float()).abs().max() / (want.float().abs().max() + 1e-6))
    if error > tolerance:
        return f"the fused layer differs from {type(layer).__name__} (relative error {error:.2e})"
    return None


def fuse_layers(model: Any) -> FusedLayers:
    """Fuse the projections of every decoder layer of `model` (module docstring); the returned plan is
    inactive, with a logged `reason`, when the model does not fit."""
    found, reason = _decoder_layers(model)
    if reason is not None:
        logger.info("fused projections off: %s; serving the model's own layers", reason)
        return FusedLayers([], reason)
    entries = [_Layer(layer) for layer in found]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    plan = FusedLayers(entries, head=_Head(head) if type(head).__name__ == "Linear" else None)
    for entry in entries:
        entry.fuse()
        entry.install(plan)
    reason = _check(plan, entries[0])
    if reason is not None:
        plan.restore()
        logger.warning("fused projections off: %s; serving the model's own layers", reason)
        return FusedLayers([], reason)
    plan.calls = 0
    logger.info(
        "fused projections: %d %s layers (q/k/v and gate/up as one matmul each)", len(entries), type(found[0]).__name__
    )
    return plan
