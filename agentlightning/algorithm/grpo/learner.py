"""The GRPO learner: the trainable policy (optionally LoRA), its optimizer, one update step, checkpoints."""

from __future__ import annotations

import copy
import logging
import math
import random
import re
import shutil
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ContextManager, Dict, List, Optional, Sequence, Tuple, Union

from ...serving.heap import release_free_memory
from ...serving.models import TRAIN_EXTRA_HINT, resolve_device
from .batch import Sample, TokenBatch, collate, micro_batches, rollout_row_weights, truncate_sample
from .config import GRPOConfig
from .loss import Objective, StepScale, grpo_loss, nll_loss, token_entropy, token_logprobs
from .metrics import UpdateProgress, UpdateTally
from .prefix import EncodedPrefix, common_prefix, forward_logits, pad_left, row_chunks

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

__all__ = ["GRPOLearner", "UpdateProgress"]

logger = logging.getLogger(__name__)

_CHECKPOINT_RE = re.compile(r"^step-(\d+)$")
_SUMMED_METRICS = {
    "optimizer_steps",
    "samples",
    "response_tokens",
    "row_tokens",
    "tokens_trained",
    "tokens_update_cap",
    "old_logprobs_recomputed",
    "train_time_s",
}
_ROLE_METRICS = ("loss", "pg_loss", "kl", "grad_norm", "samples", "advantage_abs_mean", "response_tokens")
_WEIGHTS_FILE = "weights.pt"
_STATE_FILE = "trainer_state.pt"


class GRPOLearner:
    """Owns the policy being trained and updates it from samples with the GRPO loss.

    With `config.lora_rank > 0` the model is wrapped by peft (in place: a server holding the same model
    serves the adapted policy) and the reference policy is the same model with adapters disabled;
    otherwise, with `kl_coef > 0`, a frozen copy of the initial model is the reference.

    With `config.roles` the peft model holds one adapter per role, each with its own optimizer; a step
    updates each role's adapter from that role's samples only (`Sample.role`).
    """

    def __init__(self, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, config: GRPOConfig) -> None:
        import torch

        if tokenizer.pad_token_id is None:
            raise ValueError("tokenizer has no pad token; run serving.models.prepare_tokenizer on it first")
        self.config = config
        self.tokenizer = tokenizer
        self.pad_token_id = int(tokenizer.pad_token_id)  # type: ignore[arg-type]
        self.device = resolve_device(config.device)
        self._cache_keyword: Optional[str] = None
        torch.manual_seed(config.seed)
        model.to(self.device)
        self.frozen_embeddings: List[torch.nn.Parameter] = []
        """What `freeze_embeddings` froze (a hand-off in a schedule gives it back to the next stage's config)."""
        if config.freeze_embeddings and config.lora_rank == 0:
            for embeddings in (model.get_input_embeddings(), model.get_output_embeddings()):  # type: ignore[operator]
                if embeddings is not None and embeddings.weight.requires_grad:  # tied: the same weight once
                    embeddings.weight.requires_grad_(False)
                    self.frozen_embeddings.append(embeddings.weight)
        self.policy: torch.nn.Module = self._wrap_lora(model) if config.lora_rank > 0 else model
        self.reference: Optional[torch.nn.Module] = None
        if config.kl_coef > 0 and config.lora_rank == 0:
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.roles: List[str] = list(config.roles)
        self.role_parameters: Dict[str, List[torch.nn.Parameter]] = {}
        self.role_optimizers: Dict[str, torch.optim.Optimizer] = {}
        """With roles: each adapter's parameters and optimizer (`optimizer` is then the first role's)."""
        if self.roles:
            from ...serving.adapters import adapter_parameters

            for role in self.roles:
                self.role_parameters[role] = adapter_parameters(self.policy, role)
                self.role_optimizers[role] = self._optimizer(self.role_parameters[role])
            self.trainable_parameters = [p for role in self.roles for p in self.role_parameters[role]]
            self.optimizer = self.role_optimizers[self.roles[0]]
        else:
            self.trainable_parameters = [p for p in self.policy.parameters() if p.requires_grad]
            self.optimizer = self._optimizer(self.trainable_parameters)
        self.global_step = 0
        self.progress = UpdateProgress()
        """What the learner is doing now (scoring, updating: micro-batches done, tokens/s), for progress lines."""
        self.policy.eval()

    def _optimizer(self, parameters: List[torch.nn.Parameter]) -> torch.optim.Optimizer:
        import torch

        cfg = self.config
        return torch.optim.AdamW(parameters, lr=cfg.learning_rate, betas=cfg.adam_betas, weight_decay=cfg.weight_decay)

    def _wrap_lora(self, model: torch.nn.Module) -> torch.nn.Module:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as exc:
            raise ImportError(f"LoRA (lora_rank > 0) needs peft; {TRAIN_EXTRA_HINT}") from exc
        lora = LoraConfig(
            r=self.config.lora_rank,
            lora_alpha=self.config.lora_alpha,
            lora_dropout=self.config.lora_dropout,
            target_modules=list(self.config.lora_target_modules),
            task_type="CAUSAL_LM",
        )
        if not self.config.roles:
            return get_peft_model(model, lora)  # type: ignore[arg-type]
        first, *others = list(self.config.roles)
        wrapped: Any = get_peft_model(model, lora, adapter_name=first)  # type: ignore[arg-type]
        for role in others:
            wrapped.add_adapter(role, copy.deepcopy(lora))
        return wrapped

    @property
    def uses_lora(self) -> bool:
        return self.config.lora_rank > 0

    def _reference_context(self) -> ContextManager[Any]:
        if self.uses_lora:
            return self.policy.disable_adapter()  # type: ignore[operator]
        return nullcontext()

    # Scoring -----------------------------------------------------------------------------------------

    def score(self, samples: Sequence[Sample], *, reference: bool = False) -> List[List[float]]:
        """Response-token logprobs of each sample under the policy (or the reference), without gradients."""
        import torch

        model = self.reference if (reference and self.reference is not None) else self.policy
        context = self._reference_context() if reference and self.reference is None else nullcontext()
        was_training = model.training
        model.eval()
        values: List[List[float]] = [[] for _ in samples]
        batches = micro_batches(list(range(len(samples))), samples, self.config.micro_batch_size)
        self.progress.begin("scoring" if not reference else "scoring (reference)", len(batches))
        try:
            with torch.no_grad(), context:
                for indices in batches:
                    batch = collate([samples[i] for i in indices], self.pad_token_id).to(self.device)
                    logits, offset = self._logits(model, batch)
                    logprobs, _ = token_logprobs(logits, batch.input_ids[:, offset:], self.config.temperature)
                    del logits
                    for i, row in zip(indices, batch.response_values(pad_left(logprobs, offset)), strict=True):
                        values[i] = row
                    self.progress.advance(int(batch.attention_mask.sum().item()))
        finally:
            model.train(was_training)
        return values

    def _logits(self, model: Any, batch: TokenBatch) -> Tuple[torch.Tensor, int]:
        """`(logits, offset)` of a micro-batch from its first response position on, its shared prompt prefix
        encoded once (see `prefix.py`)."""
        return forward_logits(
            model,
            batch.input_ids,
            batch.attention_mask,
            max_shared=min(batch.prompt_lengths),
            min_shared_tokens=self.config.shared_prefix_min_tokens,
            cache_keyword=self._cache_keyword_of(model),
            keep_from=min(batch.prompt_lengths) - 1,
        )

    def _cache_keyword_of(self, model: Any) -> str:
        from ...serving.sampling import kv_cache_keyword

        if self._cache_keyword is None:
            self._cache_keyword = kv_cache_keyword(model)
        return self._cache_keyword

    # Update ------------------------------------------------------------------------------------------

    def step(
        self, samples: Sequence[Sample], *, off_policy: bool = False, objective: Objective = "grpo"
    ) -> Dict[str, float]:
        """One GRPO update over `samples` (`epochs_per_batch` passes); returns the step's metrics.

        With roles, each role's samples update only that role's adapter, with its own optimizer; the
        metrics are then summed (counts) or averaged over roles, and also reported as `role_<name>_<key>`.

        `off_policy` (async training): the samples may come from older weights. The current weights score
        them first (pi_prox, the ratio's denominator), and each token's loss is scaled by the truncated
        importance weight min(pi_prox / pi_behaviour, `is_ratio_cap`), pi_behaviour being the logprobs
        recorded at sampling time.

        `objective="nll"` (rejection-sampling fine-tuning): a supervised update instead, the negative
        log-likelihood at temperature 1 of the samples' trained tokens (`loss.nll_loss`); advantages,
        logprobs recorded at sampling time, `off_policy` and the KL term play no part.
        """
        if objective not in ("grpo", "nll"):
            raise ValueError(f"objective must be 'grpo' or 'nll', got {objective!r}")
        if not samples:
            raise ValueError("GRPO step got no samples; check that rollouts produced triplets with token ids")
        try:
            if self.roles:
                metrics = self._step_roles(samples, off_policy, objective)
            else:
                metrics = self._update(samples, off_policy, self.optimizer, self.trainable_parameters, objective)
        finally:
            self.progress.finish()
            release_free_memory()  # the activations' pages go back to the OS: the process stays flat across steps
        self.global_step += 1
        return metrics

    def release_optimizer_state(self) -> None:
        """Free the optimizers' state (AdamW: two tensors per weight) and the gradients, once this learner is
        done (its weights handed on); a later `step` starts the moments from zero again."""
        for optimizer in {id(o): o for o in [self.optimizer, *self.role_optimizers.values()]}.values():
            optimizer.state.clear()
            optimizer.zero_grad(set_to_none=True)
        release_free_memory()

    def skip_step(self, samples: Sequence[Sample]) -> Dict[str, float]:
        """Count a step without updating (nothing to learn from `samples`): the weights and optimizer stay."""
        self.global_step += 1
        release_free_memory()  # the step's generation freed memory too: the process stays flat without updates
        return {
            "update_skipped": 1.0,
            "samples": float(len(samples)),
            "optimizer_steps": 0.0,
            "old_logprobs_recomputed": 0.0,
            "train_time_s": 0.0,
        }

    def _step_roles(self, samples: Sequence[Sample], off_policy: bool, objective: Objective) -> Dict[str, float]:
        from ...serving.adapters import active_adapter

        unknown = sorted({str(s.role) for s in samples if s.role not in self.role_optimizers})
        if unknown:
            raise ValueError(f"samples of roles {unknown} have no adapter; this learner trains roles {self.roles}")
        per_role: Dict[str, Dict[str, float]] = {}
        for role in self.roles:
            mine = [s for s in samples if s.role == role]
            if not mine:
                continue
            with active_adapter(self.policy, role):
                per_role[role] = self._update(
                    mine, off_policy, self.role_optimizers[role], self.role_parameters[role], objective
                )
        combined: Dict[str, float] = {}
        for key in next(iter(per_role.values())):
            values = [m[key] for m in per_role.values() if key in m]
            combined[key] = sum(values) if key in _SUMMED_METRICS else sum(values) / len(values)
        for role, metrics in per_role.items():
            combined.update({f"role_{role}_{key}": metrics[key] for key in _ROLE_METRICS if key in metrics})
        return combined

    def _update(
        self,
        samples: Sequence[Sample],
        off_policy: bool,
        optimizer: torch.optim.Optimizer,
        parameters: List[torch.nn.Parameter],
        objective: Objective = "grpo",
    ) -> Dict[str, float]:
        """Prepare the rows (old, proximal and reference logprobs), then take the optimizer steps on them."""
        started = time.perf_counter()
        supervised = objective == "nll"
        off_policy = off_policy and not supervised
        rows, recomputed = self._prepare(samples, supervised)
        importance: Dict[str, float] = {}
        if off_policy:
            rows, importance = self._with_importance_weights(rows)
        if self.config.kl_coef > 0 and not supervised:
            rows = [replace(s, ref_logprobs=r) for s, r in zip(rows, self.score(rows, reference=True), strict=True)]
        tally = self._optimize(rows, optimizer, parameters, supervised, off_policy)
        elapsed = time.perf_counter() - started
        metrics = tally.metrics(rows, elapsed)
        metrics["old_logprobs_recomputed"] = float(recomputed)
        metrics["learning_rate"] = float(optimizer.param_groups[0]["lr"])
        return {**metrics, **importance}

    def _prepare(self, samples: Sequence[Sample], supervised: bool) -> Tuple[List[Sample], int]:
        """Rows cut to the length limits, with the sampler's logprobs (scored now where none were recorded)."""
        cfg = self.config
        rows = [truncate_sample(s, cfg.max_prompt_length, cfg.max_response_length) for s in samples]
        missing = [] if supervised else [i for i, s in enumerate(rows) if s.old_logprobs is None]
        if missing:
            for i, logprobs in zip(missing, self.score([rows[i] for i in missing]), strict=True):
                rows[i] = replace(rows[i], old_logprobs=logprobs)
        return rows, len(missing)

    def _with_importance_weights(self, rows: List[Sample]) -> Tuple[List[Sample], Dict[str, float]]:
        """Async training: the current weights score the rows (pi_prox, the ratio's denominator) and each token
        gets the truncated importance weight min(pi_prox / pi_behaviour, `is_ratio_cap`)."""
        cap = self.config.is_ratio_cap
        total = capped = tokens = 0.0
        weighted: List[Sample] = []
        for row, prox in zip(rows, self.score(rows), strict=True):
            behaviour = row.old_logprobs or prox
            weights = [min(math.exp(p - b), cap) for p, b in zip(prox, behaviour, strict=True)]
            for weight, keep in zip(weights, row.loss_mask or [1] * len(prox), strict=True):
                if keep:
                    total, capped, tokens = total + weight, capped + float(weight >= cap), tokens + 1.0
            weighted.append(replace(row, old_logprobs=prox, is_weights=weights))
        return weighted, {
            "is_weight_mean": total / max(1.0, tokens),
            "is_weight_capped_fraction": capped / max(1.0, tokens),
        }

    def _optimize(
        self,
        rows: List[Sample],
        optimizer: torch.optim.Optimizer,
        parameters: List[torch.nn.Parameter],
        supervised: bool,
        off_policy: bool,
    ) -> UpdateTally:
        """`epochs_per_batch` passes over the rows in a seeded order, `gradient_accumulation_steps` micro-batches
        per optimizer step, at most `max_updates_per_batch` steps."""
        import torch

        cfg = self.config
        weights = rollout_row_weights(rows)
        order_generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + self.global_step)
        tally = UpdateTally()
        plan: List[List[int]] = []  # the rows of each optimizer step
        for _epoch in range(cfg.epochs_per_batch):
            order = torch.randperm(len(rows), generator=order_generator).tolist()
            per_step = (cfg.gradient_accumulation_steps or math.ceil(len(order) / cfg.micro_batch_size)) * (
                cfg.micro_batch_size
            )
            plan.extend(order[i : i + per_step] for i in range(0, len(order), per_step))
        plan = plan[: cfg.max_updates_per_batch or None]
        used = {i for members in plan for i in members}
        tally.tokens_trained = sum(rows[i].trained_tokens for i in used)
        tally.tokens_update_cap = sum(row.trained_tokens for i, row in enumerate(rows) if i not in used)
        steps = [micro_batches(members, rows, cfg.micro_batch_size) for members in plan]
        self.progress.begin("learner update", sum(len(step) for step in steps))
        self.policy.train()
        try:
            for micro in steps:
                members = [i for indices in micro for i in indices]
                scale = StepScale(
                    num_tokens=float(sum(rows[i].trained_tokens for i in members)),
                    num_sequences=float(len(members)),
                    total_weight=sum(weights[i] * rows[i].trained_tokens for i in members),
                )
                optimizer.zero_grad(set_to_none=True)
                step_loss = 0.0
                for indices in micro:
                    members = [rows[i] for i in indices]
                    member_weights = [weights[i] for i in indices]
                    step_loss += self._backward_rows(members, member_weights, scale, supervised, off_policy, tally)
                max_norm = cfg.max_grad_norm if cfg.max_grad_norm is not None else math.inf
                tally.grad_norms.append(float(torch.nn.utils.clip_grad_norm_(parameters, max_norm)))
                optimizer.step()
                tally.losses.append(step_loss)
        finally:
            optimizer.zero_grad(set_to_none=True)
            self.policy.eval()
        return tally

    def _backward_rows(
        self,
        members: List[Sample],
        row_weights: List[float],
        scale: StepScale,
        supervised: bool,
        off_policy: bool,
        tally: UpdateTally,
    ) -> float:
        """A micro-batch's share of the optimizer step's loss, backpropagated; returns its value.

        Its rows go forward and backward in chunks of at most `backward_chunk_tokens` tokens past their shared
        prefix, which is encoded once (`prefix.EncodedPrefix`): the same gradients, the activations of a chunk.
        """
        import torch

        cfg = self.config
        sequences = [s.prompt_ids + s.response_ids for s in members]
        shared = 0
        if cfg.shared_prefix_min_tokens > 0 and len(members) > 1:
            shared = common_prefix(sequences, min(len(s.prompt_ids) for s in members) - 1)
            shared = shared if shared >= cfg.shared_prefix_min_tokens else 0
        chunks = row_chunks([len(ids) - shared for ids in sequences], cfg.backward_chunk_tokens)
        prefix: Optional[EncodedPrefix] = None
        if len(chunks) > 1 and shared:
            ids = torch.tensor([sequences[0][:shared]], dtype=torch.long, device=self.device)
            prefix = EncodedPrefix.encode(self.policy, ids, self._cache_keyword_of(self.policy))
        loss = 0.0
        try:
            for chunk in chunks:
                batch = collate([members[i] for i in chunk], self.pad_token_id, [row_weights[i] for i in chunk])
                loss += self._backward(batch.to(self.device), scale, supervised, off_policy, tally, prefix)
            if prefix is not None:
                prefix.backward()
        finally:
            if prefix is not None:
                prefix.release()
        self.progress.advance()
        return loss

    def _backward(
        self,
        batch: TokenBatch,
        scale: StepScale,
        supervised: bool,
        off_policy: bool,
        tally: UpdateTally,
        prefix: Optional[EncodedPrefix] = None,
    ) -> float:
        """The loss of some rows (their share of the optimizer step's), backpropagated; returns its value.

        With `prefix`, the rows start with it and only their rest goes forward (its gradients wait in the
        prefix's cache for `prefix.backward()`)."""

        cfg = self.config
        temperature = 1.0 if supervised else cfg.temperature
        # Logits from the rows' first response position on (`offset`; 0 without one).
        if prefix is None:
            logits, offset = self._logits(self.policy, batch)
        else:
            logits, offset = prefix.logits(
                self.policy,
                batch.input_ids,
                batch.attention_mask,
                cache_keyword=self._cache_keyword_of(self.policy),
                keep_from=min(batch.prompt_lengths) - 1,
            )
        ids = batch.input_ids[:, offset:]
        if cfg.entropy_coef:
            logprobs, entropy = token_logprobs(logits, ids, temperature, with_entropy=True)
        else:
            logprobs, _ = token_logprobs(logits, ids, temperature)
            entropy = token_entropy(logits, temperature)  # only logged: row by row, no graph
        logprobs = pad_left(logprobs, offset)
        entropy = pad_left(entropy, offset) if entropy is not None else None
        common: Dict[str, Any] = {
            "entropy": entropy,
            "aggregation": cfg.loss_aggregation,
            "num_tokens": scale.num_tokens,
            "num_sequences": scale.num_sequences,
            "row_weights": batch.row_weights,
            "total_weight": scale.total_weight,
        }
        if supervised:
            out = nll_loss(logprobs, batch.response_mask, **common)
        else:
            use_reference = cfg.kl_coef > 0
            out = grpo_loss(
                logprobs,
                batch.old_logprobs,
                batch.token_advantages,
                batch.response_mask,
                clip_eps_low=cfg.clip_eps_low,
                clip_eps_high=cfg.clip_eps_high,
                ref_logprobs=batch.ref_logprobs if use_reference else None,
                kl_coef=cfg.kl_coef,
                entropy_coef=cfg.entropy_coef,
                is_weights=batch.is_weights if off_policy else None,
                **common,
            )
        del logits
        out.loss.backward()
        count = float(batch.response_mask.sum().item())
        tokens = int(batch.attention_mask.sum().item())
        tally.tokens_seen += tokens
        for name in ("pg_loss", "kl", "entropy", "clip_fraction", "ratio"):
            tally.sums[name] += float(getattr(out, name).item()) * count
        tally.sums["tokens"] += count
        self.progress.count(tokens)
        return float(out.loss.item())

    # Checkpoints -------------------------------------------------------------------------------------

    def save_checkpoint(self, directory: Union[str, Path], extra: Optional[Dict[str, Any]] = None) -> Path:
        """Write `<directory>/step-<global_step>/` atomically (trainable weights, optimizer, step, RNG, config)."""
        import torch

        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        final = root / f"step-{self.global_step:06d}"
        staging = root / f".{final.name}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        weights = {name: p.detach().cpu() for name, p in self._checkpointed_parameters().items()}
        torch.save(weights, staging / _WEIGHTS_FILE)
        state = {
            "global_step": self.global_step,
            "optimizer": self.optimizer.state_dict(),
            "role_optimizers": {role: opt.state_dict() for role, opt in self.role_optimizers.items()},
            "rng": _rng_state(),
            "config": self.config.to_dict(),
            "extra": extra or {},
        }
        torch.save(state, staging / _STATE_FILE)
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        self._prune(root)
        return final

    def _prune(self, root: Path) -> None:
        checkpoints = sorted(_list_checkpoints(root))
        for _step, path in checkpoints[: max(0, len(checkpoints) - self.config.keep_checkpoints)]:
            shutil.rmtree(path, ignore_errors=True)

    @staticmethod
    def latest_checkpoint(directory: Union[str, Path]) -> Optional[Path]:
        """The newest complete checkpoint under `directory`, or None."""
        checkpoints = sorted(_list_checkpoints(Path(directory)))
        return checkpoints[-1][1] if checkpoints else None

    def load_checkpoint(self, path: Union[str, Path]) -> Dict[str, Any]:
        """Restore weights, optimizer, step and RNG from a checkpoint; returns the `extra` dict saved with it."""
        import torch

        folder = Path(path)
        if not (folder / _STATE_FILE).exists():
            raise FileNotFoundError(f"{folder} is not a GRPO checkpoint (no {_STATE_FILE}); pass a step-NNNNNN folder")
        weights = torch.load(folder / _WEIGHTS_FILE, map_location=self.device)
        expected = set(self._checkpointed_parameters())
        if set(weights) != expected:
            raise ValueError(
                f"checkpoint {folder} does not match this model: missing {sorted(expected - set(weights))[:3]}, "
                f"unexpected {sorted(set(weights) - expected)[:3]}; was it saved with other LoRA settings?"
            )
        with torch.no_grad():
            parameters = dict(self.policy.named_parameters())
            for name, value in weights.items():
                parameters[name].copy_(value)
        state = torch.load(folder / _STATE_FILE, map_location="cpu", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        for role, optimizer in self.role_optimizers.items():
            optimizer.load_state_dict(state["role_optimizers"][role])
        self.global_step = int(state["global_step"])
        _set_rng_state(state["rng"])
        return dict(state.get("extra") or {})

    def _checkpointed_parameters(self) -> Dict[str, torch.nn.Parameter]:
        """The parameters a checkpoint holds: the trainable ones (with roles: every role's adapter)."""
        if self.roles:
            ids = {id(p) for p in self.trainable_parameters}
            return {name: p for name, p in self.policy.named_parameters() if id(p) in ids}
        return {name: p for name, p in self.policy.named_parameters() if p.requires_grad}

    def export_model(self, directory: Union[str, Path]) -> Path:
        """Save the trained policy (LoRA merged) with its tokenizer in Hugging Face format (`agl serve --model`).

        With roles the adapters cannot be merged into one model: the frozen base goes to `directory` and
        each role's adapter, in peft's format, to `directory/adapters/<role>/`.
        """
        target = Path(directory)
        model: Any = self.policy
        if self.roles:
            copy.deepcopy(model).unload().save_pretrained(target)
            model.save_pretrained(target / "adapters", selected_adapters=self.roles)
            self.tokenizer.save_pretrained(target)
            return target
        if self.uses_lora:
            model = copy.deepcopy(self.policy).merge_and_unload()  # type: ignore[operator]
        model.save_pretrained(target)
        self.tokenizer.save_pretrained(target)
        return target


def _list_checkpoints(root: Path) -> List[tuple[int, Path]]:
    if not root.is_dir():
        return []
    found: List[tuple[int, Path]] = []
    for child in root.iterdir():
        match = _CHECKPOINT_RE.match(child.name)
        if match and (child / _STATE_FILE).exists():
            found.append((int(match.group(1)), child))
    return found


def _rng_state() -> Dict[str, Any]:
    import torch

    state: Dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Dict[str, Any]) -> None:
    import torch

    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
