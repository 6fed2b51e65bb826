"""Verified weight sync: a GRPO run whose policy server does not serve what the learner trained stops.

Each test runs GRPO through `Trainer.fit` (real runners, store and policy server on a tiny model) with a
fault injected into the server's weight loading, the way such bugs happen in practice: a LoRA adapter that
is never pushed, an adapter that is never merged into the served copy, tensors loaded into the wrong
layer. The run fails at the first sync after the first update, with an error naming the tensor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, Sequence

import pytest
import torch

import agentlightning.serving.engine as engine_module
from agentlightning.algorithm.grpo import GRPO, GRPOConfig
from agentlightning.algorithm.grpo.weight_sync import WeightSyncError
from agentlightning.serving.adapters import copy_adapter_weights
from agentlightning.serving.weights import merged_state_dict
from agentlightning.store.memory import InMemoryLightningStore
from tests.algorithm.grpo.test_algorithm import _config, _fit
from tests.algorithm.grpo.test_roles_training import PlannerCoderAgent
from tests.support.tiny_model import tiny_model

pytestmark = [pytest.mark.train, pytest.mark.slow]


def _small(tmp_path: Path, **overrides: Any) -> GRPOConfig:
    """Two groups of two rollouts per step, short answers: the update happens, fast."""
    values: Dict[str, Any] = {"group_size": 2, "max_new_tokens": 4, "checkpoint_dir": None, **overrides}
    return _config(tmp_path, **values)


def _run(config: GRPOConfig) -> GRPO:
    model, tokenizer = tiny_model()
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    _fit(algorithm, InMemoryLightningStore())
    return algorithm


@pytest.mark.parametrize(
    "overrides",
    [{"lora_rank": 4, "serve_dtype": "bfloat16"}, {"async_rollouts": True}],
    ids=["lora-merged-copy", "async-swap"],
)
def test_every_update_is_verified_against_the_served_fingerprint(tmp_path: Path, overrides: Dict[str, Any]) -> None:
    algorithm = _run(_small(tmp_path, **overrides))
    assert [r["step"] for r in algorithm.history] == [1, 2]
    for record in algorithm.history:
        assert record["weight_sync_verified"] == 1.0 and record["weight_sync_tensors_checked"] >= 7, record


def test_a_lora_adapter_never_pushed_stops_the_run_at_the_first_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def push_the_first_adapter_only(source: torch.nn.Module, target: torch.nn.Module, adapters: Sequence[str]) -> None:
        copy_adapter_weights(source, target, list(adapters)[:1])

    monkeypatch.setattr(engine_module, "copy_adapter_weights", push_the_first_adapter_only)
    config = _small(tmp_path, lora_rank=4, roles=["planner", "coder"], async_rollouts=True, total_steps=3)
    model, tokenizer = tiny_model()
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    with pytest.raises(WeightSyncError, match=r"tensor '[^']*lora_B\.coder\.weight': served checksum") as caught:
        _fit(algorithm, InMemoryLightningStore(), agent=PlannerCoderAgent())
    assert "planner" not in str(caught.value)
    assert algorithm.history == [] and algorithm.learner is not None and algorithm.learner.global_step == 1


def _base_weights_only(module: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """A loader that takes a peft model's base weights and never merges the trained adapter in."""
    if not hasattr(module, "peft_config"):
        return merged_state_dict(module)
    base: Any = module.get_base_model()  # type: ignore[operator]
    return {k.replace(".base_layer.", "."): v for k, v in base.state_dict().items() if ".lora_" not in k}


def _layers_off_by_one(module: torch.nn.Module) -> Mapping[str, torch.Tensor]:
    """A loader whose layer numbering is off by one: layer 0's tensors land in layer 1 and back."""
    state = merged_state_dict(module)
    return {
        k.replace(".layers.0.", ".layers.X.").replace(".layers.1.", ".layers.0.").replace(".layers.X.", ".layers.1."): v
        for k, v in state.items()
    }


@pytest.mark.parametrize(
    ("loader", "overrides", "named"),
    [
        (_base_weights_only, {"lora_rank": 4}, r"model\.layers\.\d\.self_attn\.[qkvo]_proj\.weight"),
        (_layers_off_by_one, {}, r"model\.layers\.[01]\."),
    ],
    ids=["adapter-never-merged", "tensor-in-the-wrong-slot"],
)
def test_a_served_copy_loaded_wrongly_stops_the_run_at_the_first_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loader: Any, overrides: Dict[str, Any], named: str
) -> None:
    monkeypatch.setattr(engine_module, "merged_state_dict", loader)
    model, tokenizer = tiny_model()
    config = _small(tmp_path, serve_dtype="bfloat16", total_steps=3, **overrides)
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    with pytest.raises(WeightSyncError, match=rf"learner step 1: .*tensor '{named}[^']*': served checksum"):
        _fit(algorithm, InMemoryLightningStore())
    assert algorithm.history == [] and algorithm.learner is not None and algorithm.learner.global_step == 1


def test_the_check_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "merged_state_dict", _layers_off_by_one)
    config = _small(tmp_path, serve_dtype="bfloat16", verify_weight_sync=False)
    algorithm = _run(config)
    assert [r["step"] for r in algorithm.history] == [1, 2]
    assert all("weight_sync_verified" not in r for r in algorithm.history)


def test_a_sync_cpu_run_serves_prepacked_copies_and_a_copy_that_misses_an_update_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentlightning.serving.fused import FusedLayers

    packs: list[int] = []
    pack = FusedLayers.pack
    monkeypatch.setattr(
        FusedLayers, "pack", lambda self, batch_hint: (packs.append(batch_hint), pack(self, batch_hint))[1]
    )
    algorithm = _run(_small(tmp_path))  # sync on CPU: serve_fuse resolves to on, the copies packed per update
    assert [r["weight_sync_verified"] for r in algorithm.history] == [1.0, 1.0]
    assert len(packs) >= 3  # at start, then again after each of the two updates

    # The copies kept through an update and never packed again serve the old weights: the check sees it.
    monkeypatch.setattr(FusedLayers, "unpack", lambda self: False)
    monkeypatch.setattr(FusedLayers, "refresh", lambda self: 0)
    with pytest.raises(WeightSyncError, match=r"weight sync check failed at learner step 1.*checksum"):
        _run(_small(tmp_path, weight_sync_watch_per_layer=0))


def test_serve_fuse_is_on_only_where_it_adds_no_peak_memory(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    resolve = GRPO(_small(tmp_path), model=model, tokenizer=tokenizer)._serve_fuse  # type: ignore[reportPrivateUsage]
    assert resolve(torch.device("cpu"), shared=True) is True  # the learner's own weights: dropped during updates
    assert resolve(torch.device("cpu"), shared=False) is None  # a served copy (async): the engine's default, off
    assert resolve(torch.device("cuda"), shared=True) is None  # CUDA: the engine's default, on
    explicit = GRPO(_small(tmp_path, serve_fuse=False), model=model, tokenizer=tokenizer)._serve_fuse  # type: ignore[reportPrivateUsage]
    assert explicit(torch.device("cpu"), shared=True) is False
