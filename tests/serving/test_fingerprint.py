"""The policy server's weights fingerprint: version, adapters and exact checksums of watched tensors."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest
import torch

from agentlightning.serving.fingerprint import (
    FINGERPRINT_PATH,
    WeightsFingerprint,
    compare_fingerprints,
    fingerprint_of,
    tensor_checksum,
    watched_names,
)
from agentlightning.serving.server import PolicyServer
from tests.support.tiny_model import tiny_model

pytestmark = pytest.mark.train


def _get(server: PolicyServer, **params: Any) -> httpx.Response:
    return httpx.get(f"{server.endpoint.removesuffix('/v1')}{FINGERPRINT_PATH}", params=params, timeout=30)


def test_the_served_fingerprint_follows_every_update(server: PolicyServer, model_and_tokenizer: Any) -> None:
    model, _tokenizer = model_and_tokenizer
    first = WeightsFingerprint.model_validate(_get(server).json())
    assert first.version == 0 and first.adapters == [] and first.device == "cpu"
    assert first == fingerprint_of(model, version=0)
    assert "model.embed_tokens.weight" in first.tensors and "model.norm.weight" in first.tensors
    # Two of the nine tensors of each layer are watched; every tensor with per_layer=0.
    assert sum(".layers.0." in name for name in first.tensors) == 2
    everything = WeightsFingerprint.model_validate(_get(server, per_layer=0).json())
    assert set(everything.tensors) == set(model.state_dict())

    other = tiny_model(seed=1)[0].state_dict()
    assert server.update_weights(other) == 1
    second = WeightsFingerprint.model_validate(_get(server).json())
    assert second.version == 1
    problems = compare_fingerprints(first, second)
    assert problems[0] == "weights version: served weights-v1, expected weights-v0"
    assert any("model.embed_tokens.weight" in p and "checksum" in p for p in problems)


def test_a_negative_per_layer_is_a_400_naming_the_parameter(server: PolicyServer) -> None:
    response = _get(server, per_layer=-1)
    assert response.status_code == 400
    assert "per_layer must be >= 0" in response.json()["error"]["message"]


def test_the_checksum_sees_a_moved_value_and_a_rounding_difference() -> None:
    tensor = torch.randn(64, 8)
    swapped = tensor.clone()
    swapped[0, 0], swapped[0, 1] = tensor[0, 1].item(), tensor[0, 0].item()
    assert tensor_checksum(swapped) != tensor_checksum(tensor)
    assert tensor_checksum(tensor.clone()) == tensor_checksum(tensor)
    nudged = tensor.clone()
    nudged[3, 3] = torch.nextafter(nudged[3, 3], torch.tensor(1e9))
    assert tensor_checksum(nudged) != tensor_checksum(tensor)
    assert tensor_checksum(tensor.to(torch.bfloat16)) == tensor_checksum(tensor.to(torch.bfloat16).clone())
    assert tensor_checksum(tensor.double()) != tensor_checksum(tensor)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_the_checksum_is_the_documented_sum_across_chunk_boundaries(dtype: torch.dtype) -> None:
    modulus = 2**31 - 1
    tensor = torch.randn(4_500_001).to(dtype)  # longer than one pass: positions go on past the first chunk
    bits = tensor.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]).to(torch.int64)
    if tensor.element_size() == 8:
        bits = torch.remainder(bits, modulus)
    weights = torch.remainder(torch.arange(bits.numel(), dtype=torch.int64), 65_521) + 1
    assert tensor_checksum(tensor) == int(torch.remainder(torch.remainder(bits * weights, modulus).sum(), modulus))


def test_the_watched_set_rotates_over_every_tensor_of_a_layer() -> None:
    names = [f"model.layers.{i}.{part}.weight" for i in range(3) for part in "abcdefg"] + ["model.norm.weight"]
    seen = set()
    for version in range(7):
        watched = watched_names(names, per_layer=2, rotation=version)
        assert "model.norm.weight" in watched
        assert [sum(f".layers.{i}." in n for n in watched) for i in range(3)] == [2, 2, 2]
        seen.update(watched)
    assert seen == set(names)
    with pytest.raises(ValueError, match="per_layer must be >= 0"):
        watched_names(names, per_layer=-1)


def test_a_copy_in_another_dtype_matches_when_the_learner_casts_like_the_server() -> None:
    model = tiny_model(seed=0)[0]
    served = copy.deepcopy(model).to(torch.bfloat16)
    reported = fingerprint_of(served, version=3, per_layer=0)
    dtypes = {name: t.dtype for name, t in reported.tensors.items()}
    assert compare_fingerprints(fingerprint_of(model, version=3, per_layer=0, dtypes=dtypes), reported) == []
    plain = fingerprint_of(model, version=3, per_layer=0)
    assert any("bfloat16" in p for p in compare_fingerprints(plain, reported))
