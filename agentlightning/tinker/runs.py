"""A Tinker training run on our GRPO learner: gradients accumulate over `forward_backward` calls until
`optim_step` applies them with the Adam parameters the client sends; checkpoints are learner checkpoints."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .errors import TinkerNotFound, TinkerUserError
from .losses import datum_loss
from .wire import ForwardBackwardCall, TrainingDatum

if TYPE_CHECKING:
    import torch

    from ..algorithm.grpo.learner import GRPOLearner

__all__ = [
    "LoraSettings",
    "TrainingRun",
    "lora_target_modules",
    "weights_fingerprint",
    "ATTENTION_MODULES",
    "MLP_MODULES",
]

ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "c_attn", "out_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj", "gate_up_proj", "fc1", "fc2", "c_fc", "c_proj")
_ATTENTION_BLOCK = re.compile(r"attn|attention", re.IGNORECASE)
_MLP_BLOCK = re.compile(r"mlp|ffn|feed_forward", re.IGNORECASE)
_MICRO_BATCH = 8
_RUN_FILE = "run.json"


@dataclass(frozen=True)
class LoraSettings:
    """What a `create_model` request's `lora_config` asks for (rank 0: full fine-tuning)."""

    rank: int = 0
    seed: int = 0
    train_attn: bool = True
    train_mlp: bool = True
    train_unembed: bool = False

    @classmethod
    def from_request(cls, lora: Optional[Mapping[str, Any]]) -> LoraSettings:
        if not lora:
            return cls()
        rank = int(lora.get("rank", 0))
        if rank < 1:
            raise TinkerUserError(f"lora_config.rank must be >= 1, got {rank}")
        return cls(
            rank=rank,
            seed=int(lora.get("seed") or 0),
            train_attn=bool(lora.get("train_attn", True)),
            train_mlp=bool(lora.get("train_mlp", True)),
            train_unembed=bool(lora.get("train_unembed", True)),
        )


def _is_linear(module: torch.nn.Module) -> bool:
    """A projection LoRA can adapt: `nn.Linear`, or the transposed `Conv1D` of GPT-2-style models."""
    import torch

    if isinstance(module, torch.nn.Linear):
        return True
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:
        return False
    return isinstance(module, Conv1D)


def _part_of_block(name: str) -> Optional[str]:
    """ "attn" or "mlp" for a projection's qualified name: by the block it sits in (`self_attn`, `attention`,
    `mlp`, `feed_forward`, ...), else by its own name (OPT keeps `fc1` beside the attention block)."""
    *parents, leaf = name.split(".")
    for part in reversed(parents):
        if _ATTENTION_BLOCK.search(part):
            return "attn"
        if _MLP_BLOCK.search(part):
            return "mlp"
    if leaf in ATTENTION_MODULES:
        return "attn"
    if leaf in MLP_MODULES:
        return "mlp"
    return None


def lora_target_modules(model: torch.nn.Module, lora: LoraSettings) -> List[str]:
    """The qualified names of the projections LoRA adapts: the attention ones when `train_attn`, the MLP ones
    when `train_mlp`. Full names, not leaf names, because a leaf name can be in both (GPT-2's `c_proj`)."""
    wanted = {"attn"} if lora.train_attn else set()
    wanted |= {"mlp"} if lora.train_mlp else set()
    unembed = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None  # type: ignore[operator]
    linear = [(name, module) for name, module in model.named_modules() if name and _is_linear(module)]
    targets = [name for name, module in linear if module is not unembed and _part_of_block(name) in wanted]
    if not targets:
        leaves = sorted({name.rsplit(".", 1)[-1] for name, _ in linear})
        raise TinkerUserError(
            f"lora_config adapts no layer of this model (train_attn={lora.train_attn}, train_mlp={lora.train_mlp}; "
            f"its linear layers: {leaves[:8]})"
        )
    return targets


def weights_fingerprint(state: Mapping[str, torch.Tensor]) -> str:
    """`sha256:<hex>` over a state dict's names and float32 values: equal weights, equal fingerprint."""
    import torch

    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].detach().to(torch.float32).cpu().contiguous().numpy().tobytes())
    return f"sha256:{digest.hexdigest()[:32]}"


class TrainingRun:
    """One model created through the Tinker API: a `GRPOLearner` (LoRA when asked) over its own copy of the base.

    `folder` keeps `run.json` (base model, LoRA settings) and the checkpoints: `weights/<name>/step-N` for
    `save_weights`, `sampler_weights/<name>/step-N` for `save_weights_for_sampler`.
    """

    def __init__(
        self,
        run_id: str,
        base_model: str,
        model: torch.nn.Module,
        tokenizer: Any,
        lora: LoraSettings,
        folder: Path,
        *,
        device: Optional[str] = None,
    ) -> None:
        from ..algorithm.grpo.config import GRPOConfig
        from ..algorithm.grpo.learner import GRPOLearner

        self.run_id = run_id
        self.base_model = base_model
        self.lora = lora
        self.folder = folder
        own = copy.deepcopy(model)
        config = GRPOConfig(
            lora_rank=lora.rank,
            lora_alpha=32,
            lora_target_modules=lora_target_modules(own, lora) if lora.rank else ["q_proj"],
            seed=lora.seed,
            device=device,
            learning_rate=1e-4,
            adam_betas=(0.9, 0.95),
            max_grad_norm=None,
            keep_checkpoints=1,
        )
        self.learner: GRPOLearner = GRPOLearner(own, tokenizer, config)
        self.pending_datums = 0
        """Datums whose gradients wait for the next `optim_step`."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / _RUN_FILE).write_text(json.dumps({"base_model": base_model, "lora": lora.__dict__}))

    @property
    def step(self) -> int:
        return self.learner.global_step

    # Training ----------------------------------------------------------------------------------------

    def forward_backward(self, call: ForwardBackwardCall) -> Tuple[List[Dict[str, np.ndarray]], Dict[str, float]]:
        """Per-datum target logprobs (and elementwise losses) and the summed loss; gradients accumulate
        unless `call.forward_only`."""
        import torch

        if not call.data:
            raise TinkerUserError("forward_backward got no data; send at least one Datum")
        learner = self.learner
        outputs: List[Dict[str, np.ndarray]] = []
        total = 0.0
        grad = torch.enable_grad() if not call.forward_only else torch.no_grad()
        with grad:
            for start in range(0, len(call.data), _MICRO_BATCH):
                chunk = call.data[start : start + _MICRO_BATCH]
                logprobs = self._target_logprobs(chunk)
                losses = []
                for datum, values in zip(chunk, logprobs, strict=True):
                    inputs = {
                        name: torch.as_tensor(array, device=learner.device, dtype=torch.float32)
                        for name, array in datum.loss_fn_inputs.items()
                        if name != "target_tokens"
                    }
                    loss = datum_loss(call.loss_fn, values, inputs, call.loss_fn_config)
                    losses.append(loss)
                    outputs.append({"logprobs": values.detach().float().cpu().numpy()})
                summed = torch.stack(losses).sum()
                if not call.forward_only:
                    summed.backward()
                total += float(summed.item())
        if not math.isfinite(total):
            raise TinkerUserError(f"the {call.loss_fn} loss is {total}; check the loss inputs (advantages, logprobs)")
        if not call.forward_only:
            self.pending_datums += len(call.data)
        return outputs, {"loss:sum": total}

    def _target_logprobs(self, chunk: Sequence[TrainingDatum]) -> List[torch.Tensor]:
        """log pi(target_t | tokens_<=t) for each datum of a micro-batch, padded on the right and run at once."""
        import torch

        learner = self.learner
        for index, datum in enumerate(chunk):
            targets = datum.loss_fn_inputs.get("target_tokens")
            if targets is None:
                raise TinkerUserError(f"datum {index} has no loss_fn_inputs['target_tokens']")
            if targets.reshape(-1).shape[0] != len(datum.tokens) or not datum.tokens:
                raise TinkerUserError(
                    f"datum {index}: target_tokens has {targets.size} entries but model_input {len(datum.tokens)} "
                    "tokens; they must be equal and non-zero"
                )
        vocab = int(learner.policy.get_input_embeddings().weight.shape[0])  # type: ignore[operator]
        longest = max(len(d.tokens) for d in chunk)
        ids = torch.full((len(chunk), longest), learner.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), longest), dtype=torch.long)
        targets = torch.zeros((len(chunk), longest), dtype=torch.long)
        for row, datum in enumerate(chunk):
            length = len(datum.tokens)
            ids[row, :length] = torch.tensor(datum.tokens)
            mask[row, :length] = 1
            targets[row, :length] = torch.as_tensor(datum.loss_fn_inputs["target_tokens"].reshape(-1).astype(np.int64))
        if int(ids.max()) >= vocab or int(targets.max()) >= vocab or int(ids.min()) < 0 or int(targets.min()) < 0:
            raise TinkerUserError(f"token ids must lie in [0, {vocab}) for this model")
        ids, mask, targets = ids.to(learner.device), mask.to(learner.device), targets.to(learner.device)
        logits = learner.policy(input_ids=ids, attention_mask=mask).logits.float()
        chosen = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return [chosen[row, : len(datum.tokens)] for row, datum in enumerate(chunk)]

    def optim_step(self, adam: Mapping[str, Any]) -> Dict[str, float]:
        """Apply the accumulated gradients with Adam at the client's hyperparameters, then clear them."""
        import torch

        learner = self.learner
        lr = float(adam.get("learning_rate", 1e-4))
        if not lr >= 0:
            raise TinkerUserError(f"learning_rate must be >= 0, got {lr}")
        for group in learner.optimizer.param_groups:
            group["lr"] = lr
            group["betas"] = (float(adam.get("beta1", 0.9)), float(adam.get("beta2", 0.95)))
            group["eps"] = float(adam.get("eps", 1e-12))
            group["weight_decay"] = float(adam.get("weight_decay", 0.0))
        clip = float(adam.get("grad_clip_norm", 0.0) or 0.0)
        norm = torch.nn.utils.clip_grad_norm_(learner.trainable_parameters, clip if clip > 0 else math.inf)
        learner.optimizer.step()
        learner.optimizer.zero_grad(set_to_none=True)
        learner.global_step += 1
        datums, self.pending_datums = self.pending_datums, 0
        return {"grad_norm": float(norm), "learning_rate": lr, "datums": float(datums)}

    # Checkpoints -------------------------------------------------------------------------------------

    def save(self, kind: str, name: str) -> Path:
        """Write a learner checkpoint under `<kind>/<name>` (kind: "weights" or "sampler_weights")."""
        return self.learner.save_checkpoint(self.folder / kind / name, extra={"tinker_name": name, "kind": kind})

    def load(self, folder: Path, *, optimizer: bool) -> None:
        """Restore the weights of a checkpoint folder (and its optimizer state when `optimizer`)."""
        from ..algorithm.grpo.learner import GRPOLearner

        found = GRPOLearner.latest_checkpoint(folder)
        if found is None:
            raise TinkerNotFound(f"no checkpoint under {folder}")
        saved_optimizer = copy.deepcopy(self.learner.optimizer.state_dict())
        step = self.learner.global_step
        try:
            self.learner.load_checkpoint(found)
        except ValueError as exc:
            raise TinkerUserError(str(exc))
        if not optimizer:
            self.learner.optimizer.load_state_dict(saved_optimizer)
            self.learner.global_step = step

    def merged_weights(self) -> Dict[str, torch.Tensor]:
        """The policy as a plain-model state dict (LoRA merged): what a sampler serves."""
        from ..serving.weights import merged_state_dict

        return merged_state_dict(self.learner.policy)


def read_run_file(folder: Path) -> Dict[str, Any]:
    """The `run.json` of a run folder (base model, LoRA settings), for runs of an earlier server process."""
    path = folder / _RUN_FILE
    if not path.exists():
        raise TinkerNotFound(f"training run folder {folder} has no {_RUN_FILE}; was it written by agl tinker?")
    return json.loads(path.read_text())
