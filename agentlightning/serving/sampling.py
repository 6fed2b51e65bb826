"""Per-row token sampling on the device, for a batch of rows that may each sample differently.

Logprob convention (what the server returns and GRPO trains against): the log-probability of the sampled
token under `softmax(logits / temperature)`, before top-k/top-p truncation and penalties; greedy rows
(temperature 0) use temperature 1. A trainer that scores tokens with the same temperature therefore
recomputes exactly these numbers for unchanged weights.

Randomness is counter-based: the uniform number behind a row's k-th token is a hash of the row's seed
and k (splitmix64), so a seeded row samples the same tokens alone or in any batch, no per-row generator
object is needed, and a whole batch draws its numbers in a few tensor operations.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, List, NamedTuple, Optional, Sequence, Tuple

if TYPE_CHECKING:
    import torch

__all__ = [
    "DeviceTokens",
    "SampledTokens",
    "SamplingMode",
    "SamplingParams",
    "TokenStep",
    "SlotSampling",
    "content_key",
    "content_seed",
    "kv_cache_keyword",
    "last_logits_only",
    "row_seed",
    "sample_device",
    "sample_tokens",
    "uniforms",
]


def kv_cache_keyword(model: Any) -> str:
    """The name under which `model.forward` takes and returns its KV cache.

    transformers 5.x renamed `past_key_values` to `cache` (the old name warns and goes away in 5.40);
    asking the signature keeps decoding free of deprecated arguments on either side of the rename.
    A peft wrapper forwards `**kwargs`, so the wrapped model's signature decides.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        parameters = inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


def last_logits_only(model: Any) -> dict[str, int]:
    """`logits_to_keep=1` where `model.forward` takes it: the vocabulary projection of the prompt's other
    positions is never used (it is about a fifth of the prefill's work for SmolLM2)."""
    return trailing_logits(model, 1)


def trailing_logits(model: Any, count: int) -> dict[str, int]:
    """`logits_to_keep=count` (>= 1) where `model.forward` takes it: only the last `count` positions are
    projected onto the vocabulary; {} otherwise (the caller then gets every position's logits)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        parameters = inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return {}
    return {"logits_to_keep": max(1, int(count))} if "logits_to_keep" in parameters else {}


@dataclass(frozen=True)
class SamplingParams:
    """How one completion is sampled; field names and defaults follow the OpenAI request."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: Tuple[str, ...] = ()
    seed: Optional[int] = None
    logprobs: bool = False
    top_logprobs: int = 0
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0 <= self.top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be in [0, 20], got {self.top_logprobs}")

    @property
    def truncates(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0

    @property
    def penalized(self) -> bool:
        return self.presence_penalty != 0 or self.frequency_penalty != 0


@dataclass
class TokenStep:
    """One sampled token: its id, its logprob, and the most likely alternatives when asked for."""

    token_id: int
    logprob: float
    top_logprobs: List[Tuple[int, float]] = field(default_factory=lambda: [])


# splitmix64 constants as signed int64 (torch has no uint64 arithmetic; int64 products wrap the same way).
_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)


def _mix_int(value: int) -> int:
    value &= _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def row_seed(seed: int, index: int) -> int:
    """The seed of choice `index` of a request seeded with `seed` (choices differ; each is reproducible)."""
    return _signed(_mix_int(_mix_int(seed) + (index + 1) * 0x9E3779B97F4A7C15))


def content_key(*parts: Any) -> bytes:
    """A digest of a request's content (weights version, adapter, n, sampling parameters, prompt ids)."""
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()


def content_seed(key: bytes, occurrence: int, base_seed: int = 0) -> int:
    """The seed of the `occurrence`-th request with content `key` (deterministic mode of the engine).

    Identical requests (a GRPO group's first prompt) get different seeds by their count, not by which came
    first: whichever arrives k-th samples the k-th completion, so the set of completions is reproducible.
    """
    salt = base_seed.to_bytes(16, "little", signed=True)
    digest = hashlib.blake2b(key + occurrence.to_bytes(8, "little"), digest_size=8, key=salt).digest()
    return int.from_bytes(digest, "little") >> 2


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 tensors (`>>` is arithmetic on signed values)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def uniforms(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """float64 numbers in [0, 1): the `counters`-th draw of each row's splitmix64 stream started at `seeds`."""
    z = seeds + (counters + 1) * _GOLDEN
    z = (z ^ _shift_right(z, 30)) * _MIX1
    z = (z ^ _shift_right(z, 27)) * _MIX2
    z = z ^ _shift_right(z, 31)
    return _shift_right(z, 11).double() * (2.0**-53)


class SlotSampling:
    """The sampling parameters of every slot of a batch, kept on the device so a step samples all rows at once.

    A slot is set when a row is admitted (`assign`); `sample_tokens` reads the parameters of a range of
    slots (a decode step) or of a list of slots (the first tokens after a prefill).
    """

    def __init__(self, slots: int, vocab_size: int, device: torch.device) -> None:
        import torch

        self.device = device
        self.vocab_size = vocab_size
        self.temperature = torch.zeros(slots, device=device)
        self.top_k = torch.zeros(slots, dtype=torch.long, device=device)
        self.top_p = torch.ones(slots, device=device)
        self.presence = torch.zeros(slots, device=device)
        self.frequency = torch.zeros(slots, device=device)
        self.seed = torch.zeros(slots, dtype=torch.long, device=device)
        self.params: List[Optional[SamplingParams]] = [None] * slots
        self.counts: Optional[torch.Tensor] = None
        """Per-slot token counts for presence/frequency penalties, allocated when a penalized row arrives."""

    def assign(self, slot: int, params: SamplingParams, seed: int) -> None:
        import torch

        self.params[slot] = params
        self.temperature[slot] = params.temperature
        self.top_k[slot] = params.top_k
        self.top_p[slot] = params.top_p
        self.presence[slot] = params.presence_penalty
        self.frequency[slot] = params.frequency_penalty
        self.seed[slot] = seed
        if params.penalized and self.counts is None:
            self.counts = torch.zeros((len(self.params), self.vocab_size), device=self.device)
        if self.counts is not None:
            self.counts[slot].zero_()

    def release(self, slot: int) -> None:
        self.params[slot] = None

    def move(self, src: int, dst: int) -> None:
        for tensor in (self.temperature, self.top_k, self.top_p, self.presence, self.frequency, self.seed):
            tensor[dst] = tensor[src]
        if self.counts is not None:
            self.counts[dst] = self.counts[src]
        self.params[dst], self.params[src] = self.params[src], None


class SamplingMode(NamedTuple):
    """Which sampling features a batch needs (a decode step's CUDA graph is captured per mode)."""

    sampled: bool
    """Some row samples (temperature > 0); else every row is greedy."""
    truncates: bool
    """Some row has top-k or top-p."""
    penalized: bool
    """Some row has presence or frequency penalties."""
    top_logprobs: int
    """The most alternatives a row asks for."""

    @staticmethod
    def of(params: Sequence[Optional[SamplingParams]]) -> SamplingMode:
        rows = [p for p in params if p is not None]
        return SamplingMode(
            sampled=any(p.temperature > 0 for p in rows),
            truncates=any(p.truncates for p in rows),
            penalized=any(p.penalized for p in rows),
            top_logprobs=max((p.top_logprobs for p in rows), default=0),
        )


@dataclass
class DeviceTokens:
    """A step's sampled tokens, still on the device: `packed` holds ids and logprobs for one copy to the host."""

    token_ids: torch.Tensor
    packed: torch.Tensor
    top_values: Optional[torch.Tensor] = None
    top_indices: Optional[torch.Tensor] = None

    def to_host(self) -> SampledTokens:
        return self.copy_to_host().wait()

    def copy_to_host(self) -> HostCopy:
        """Start copying to the host without waiting (on CUDA); `wait()` on the result gives the tokens.

        The copy is taken before the next step overwrites these (CUDA-graph static) outputs.
        """
        import torch

        on_cuda = self.packed.is_cuda
        tensors = [t for t in (self.packed, self.top_values, self.top_indices) if t is not None]
        copies = [torch.empty(t.shape, dtype=t.dtype, pin_memory=on_cuda) for t in tensors]
        for copy, tensor in zip(copies, tensors, strict=True):
            copy.copy_(tensor, non_blocking=on_cuda)
        event = None
        if on_cuda:
            event = torch.cuda.Event()
            event.record()
        return HostCopy(copies, event)


@dataclass
class HostCopy:
    """Sampled tokens on their way to the host (see `DeviceTokens.copy_to_host`)."""

    tensors: List[torch.Tensor]
    event: Any = None

    def wait(self) -> SampledTokens:
        if self.event is not None:
            self.event.synchronize()
        ids, logprobs = self.tensors[0].tolist()
        top = (self.tensors[1].tolist(), self.tensors[2].tolist()) if len(self.tensors) == 3 else None
        return SampledTokens([int(i) for i in ids], logprobs, top)


@dataclass
class SampledTokens:
    """A step's tokens on the host: ids, logprobs and top alternatives, by row."""

    token_ids: List[int]
    logprobs: List[float]
    top: Optional[Tuple[List[List[float]], List[List[int]]]] = None

    def step(self, row: int, top_logprobs: int) -> TokenStep:
        step = TokenStep(token_id=self.token_ids[row], logprob=self.logprobs[row])
        if top_logprobs and self.top is not None:
            values, indices = self.top
            step.top_logprobs = list(zip(indices[row][:top_logprobs], values[row][:top_logprobs], strict=False))
        return step


def _truncate_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask logits outside each row's top-k and top-p (nucleus) set with -inf."""
    import torch

    sorted_logits, sorted_idx = logits.sort(dim=-1, descending=True)
    vocab = logits.shape[-1]
    ranks = torch.arange(vocab, device=logits.device).unsqueeze(0)
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab)).unsqueeze(1)
    drop = ranks >= k
    probs = sorted_logits.softmax(dim=-1)
    drop |= (probs.cumsum(dim=-1) - probs) >= top_p.unsqueeze(1)
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, sorted_idx, sorted_logits)


def sample_device(
    logits: torch.Tensor,
    sampling: SlotSampling,
    pick: Any,
    counters: torch.Tensor,
    active: Optional[torch.Tensor],
    mode: SamplingMode,
) -> DeviceTokens:
    """Sample one token per row of `logits` with tensor operations only (no host sync: capturable in a
    CUDA graph). Row i uses the parameters of slot `pick[i]` (`pick`: a slice or an index tensor) and
    draw number `counters[i]` of its seed; `active` (per row, or None for all) marks the rows whose token
    counts toward penalties."""
    import torch

    batch = logits.shape[0]
    temps = sampling.temperature[pick]
    scale = torch.where(temps == 0, torch.ones_like(temps), temps).unsqueeze(1)
    logprobs = torch.log_softmax(logits / scale, dim=-1)
    shaped = logits
    if mode.penalized and sampling.counts is not None:
        seen = sampling.counts[pick]
        presence = sampling.presence[pick].unsqueeze(1) * (seen > 0).to(logits.dtype)
        shaped = logits - sampling.frequency[pick].unsqueeze(1) * seen - presence
    next_ids = shaped.argmax(dim=-1)
    if mode.sampled:
        scaled = shaped / scale
        if mode.truncates:
            scaled = _truncate_logits(scaled, sampling.top_k[pick], sampling.top_p[pick])
        cdf = torch.softmax(scaled, dim=-1).double().cumsum(dim=-1)
        draws = uniforms(sampling.seed[pick], counters).unsqueeze(1)
        # The total can differ from 1 by rounding: scale the draw, and never pick a zero-probability tail token.
        drawn = torch.searchsorted(cdf, draws * cdf[:, -1:], right=True).squeeze(1).clamp(max=cdf.shape[-1] - 1)
        next_ids = torch.where(temps > 0, drawn, next_ids)
    chosen = logprobs.gather(1, next_ids.unsqueeze(1)).squeeze(1)
    if mode.penalized and sampling.counts is not None:
        weight = torch.ones((batch, 1), device=logits.device) if active is None else active.float().unsqueeze(1)
        sampling.counts[pick] = sampling.counts[pick].scatter_add(1, next_ids.unsqueeze(1), weight)
    out = DeviceTokens(next_ids, torch.stack([next_ids.double(), chosen.double()]))
    if mode.top_logprobs:
        out.top_values, out.top_indices = logprobs.topk(mode.top_logprobs, dim=-1)
    return out


def sample_tokens(
    logits: torch.Tensor,
    sampling: SlotSampling,
    slots: Sequence[int],
    counters: torch.Tensor,
    rows: Optional[torch.Tensor] = None,
    active: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, SampledTokens]:
    """`sample_device` for the rows of `slots` (by index tensor `rows`, or the range `0..len(slots)-1` when
    None), then their host copy: `(ids on the device, ids/logprobs/alternatives on the host)`."""
    batch = logits.shape[0]
    pick: Any = slice(0, batch) if rows is None else rows
    out = sample_device(logits, sampling, pick, counters, active, SamplingMode.of([sampling.params[s] for s in slots]))
    return out.token_ids, out.to_host()
