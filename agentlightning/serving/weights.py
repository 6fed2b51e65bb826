"""Moving trained weights into a served model: plain or LoRA (peft) sources, shared or copied."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict

if TYPE_CHECKING:
    import torch

__all__ = ["shares_parameters", "merged_state_dict"]


def shares_parameters(source: torch.nn.Module, target: torch.nn.Module) -> bool:
    """True when every parameter of `target` is also a parameter of `source` (same storage).

    That is the shared-model mode: the trainer's module (possibly a peft wrapper around the served
    model) already *is* what the server runs, so there is nothing to copy.
    """
    source_ptrs = {p.data_ptr() for p in source.parameters()}
    return all(p.data_ptr() in source_ptrs for p in target.parameters())


def merged_state_dict(module: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """A plain-model state dict of `module`; for a peft LoRA model, base weights with the adapters merged in.

    The peft model is left untouched (no merge/unmerge round trip that would drift the base weights).
    """
    if not hasattr(module, "peft_config"):
        return {name: tensor.detach() for name, tensor in module.state_dict().items()}
    from peft.tuners.lora import LoraLayer

    base = module.get_base_model()  # type: ignore[operator]
    merged: Dict[str, torch.Tensor] = {}
    for name, tensor in base.state_dict().items():
        if ".lora_" in name or "modules_to_save" in name:
            continue
        merged[name.replace(".base_layer.", ".")] = tensor.detach()
    for name, layer in base.named_modules():
        if not isinstance(layer, LoraLayer):
            continue
        weight = layer.get_base_layer().weight.detach()  # type: ignore[operator]
        if not layer.disable_adapters:
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A:
                    weight = weight + layer.get_delta_weight(adapter).detach()  # type: ignore[attr-defined].to(weight.dtype)
        merged[f"{name}.weight"] = weight
    return merged
