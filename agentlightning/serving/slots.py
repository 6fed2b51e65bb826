"""A causal LM run over KV-cache slots: the forward passes behind continuous batching.

Every sequence the engine decodes owns a slot: a row of one preallocated key/value tensor
(`SlotKVCache`, `[layers, 2, slots, kv_heads, capacity, head_dim]`) in which the token at position p is
written at index p. A prefill writes a batch of new prompts into their slots; a decode step feeds one
token to each slot of the range `0..batch-1` at that slot's own position. Positions differ per row, so
the attention mask is built from them (`key position <= query position`), passed to the model as a
ready 4D mask, and the model's own attention (SDPA or eager, from transformers) does the rest: any
transformers causal LM that writes its cache through `cache.update(...)` runs unchanged, LoRA (peft)
included.

Rows of the range that are not decoding this step (a free slot, a sequence of another LoRA adapter) are
fed a dummy token at their next position: the garbage they write there is overwritten by their next
real token before anything reads it, and their output is ignored.

On CUDA, each decode shape (adapter, batch bucket, key-length bucket) is captured once as a CUDA graph
and replayed; inputs live in static buffers, so a step costs one launch instead of hundreds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple, Union

from .fused import FusedLayers, fuse_layers
from .regional import RegionalCompile
from .sampling import DeviceTokens, SamplingMode, SlotSampling, kv_cache_keyword, last_logits_only, sample_device

if TYPE_CHECKING:
    import torch

__all__ = ["SlotKVCache", "SlotModel", "bucket"]

logger = logging.getLogger(__name__)


def bucket(value: int, floor: int, ceiling: int) -> int:
    """The smallest power of two >= `value` (at least `floor`), capped at `ceiling`."""
    size = max(1, floor)
    while size < value:
        size *= 2
    return min(size, ceiling)


def _geometry(model: Any) -> Tuple[int, int, int, int]:
    """(layers, kv_heads, head_dim, vocab_size) from a transformers config."""
    found: Any = getattr(model, "config", None)
    config: Any = found.get_text_config() if hasattr(found, "get_text_config") else found
    try:
        layers = int(config.num_hidden_layers)
        heads = int(config.num_attention_heads)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        vocab = int(config.vocab_size)
    except (AttributeError, TypeError) as exc:
        raise ValueError(
            f"cannot size a KV cache for {type(model).__name__}: its config lacks {exc}; the policy engine "
            "serves transformers causal LMs (num_hidden_layers, num_attention_heads, hidden_size, vocab_size)"
        ) from None
    return layers, kv_heads, head_dim, vocab


class SlotKVCache:
    """Keys and values of every slot, written at each token's own position (a transformers-style cache).

    The model calls `update(keys, values, layer_idx)` once per layer; what it writes and what it reads
    back is set by `bind` before each forward pass.
    """

    is_compileable = False
    is_sliding = [False]

    def __init__(
        self,
        layers: int,
        slots: int,
        kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
        capacity: int,
    ) -> None:
        import torch

        # One position more than `capacity`: a key length never spans the whole buffer, so a compiled step
        # never specialises on the two being equal.
        self.buffer = torch.zeros((layers, 2, slots, kv_heads, capacity + 1, head_dim), dtype=dtype, device=device)
        self._rows = torch.arange(slots, device=device).view(slots, 1, 1)
        self._heads = torch.arange(kv_heads, device=device).view(1, kv_heads, 1)
        self._slots: Optional[torch.Tensor] = None
        self._write: Optional[torch.Tensor] = None
        self._kv_len = 0

    @property
    def capacity(self) -> int:
        return self.buffer.shape[4] - 1

    @property
    def slots(self) -> int:
        return self.buffer.shape[2]

    def bind(self, write_positions: torch.Tensor, kv_len: int, slots: Optional[torch.Tensor] = None) -> None:
        """The next forward writes row i's tokens at `write_positions[i]` of slot `slots[i]` (slot i when
        None) and attends over the first `kv_len` positions."""
        self._write, self._kv_len, self._slots = write_positions, kv_len, slots

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *_: Any, **__: Any) -> Any:
        assert self._write is not None, "bind() the cache before a forward pass"
        batch, _heads, length, _dim = key_states.shape
        rows = self._rows[:batch] if self._slots is None else self._slots.view(batch, 1, 1)
        index = (rows, self._heads, self._write.view(batch, 1, length))
        keys, values = self.buffer[layer_idx, 0], self.buffer[layer_idx, 1]
        keys.index_put_(index, key_states)
        values.index_put_(index, value_states)
        if self._slots is None:
            return keys[:batch, :, : self._kv_len], values[:batch, :, : self._kv_len]
        return (
            keys[:, :, : self._kv_len].index_select(0, self._slots),
            values[:, :, : self._kv_len].index_select(0, self._slots),
        )

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._kv_len

    def copy(self, src: int, dst: int, length: int) -> None:
        """Give slot `dst` the first `length` positions of slot `src` (a shared prompt, a moved sequence)."""
        if length:
            self.buffer[:, :, dst, :, :length] = self.buffer[:, :, src, :, :length]

    def read(self, slot: int, length: int) -> torch.Tensor:
        """A copy of the first `length` positions of `slot`: `[layers, 2, kv_heads, length, head_dim]`."""
        return self.buffer[:, :, slot, :, :length].clone()

    def write(self, slot: int, block: torch.Tensor, length: int) -> None:
        """Put the first `length` positions of a `read` block at the start of `slot`."""
        self.buffer[:, :, slot, :, :length] = block[:, :, :, :length]

    def grow(self, capacity: int) -> None:
        """Reallocate with room for `capacity` positions per slot, keeping what is stored."""
        import torch

        if capacity <= self.capacity:
            return
        shape = list(self.buffer.shape)
        shape[4] = capacity + 1
        with torch.inference_mode(False):  # a normal tensor, like the first one (a compiled step would recompile)
            grown = torch.zeros(shape, dtype=self.buffer.dtype, device=self.buffer.device)
            grown[:, :, :, :, : self.buffer.shape[4]] = self.buffer
        self.buffer = grown


@dataclass
class _Graph:
    graph: Any
    output: Any
    inputs: Tuple[torch.Tensor, ...] = ()


class SlotModel:
    """`model` over a `SlotKVCache` of `slots` sequences of up to `max_context` tokens.

    Per slot, static buffers hold the next input token (`input_ids`), the position it goes to
    (`positions`), the prompt length (`prompt_lengths`: a row's draw counter is its position past the
    prompt) and whether it decodes this step (`active`). The engine sets them at admission; a decode step
    (`decode_step`) reads them for the slots `0..batch-1`, samples, and moves the active rows on, without
    a round trip to the host. One extra slot (index `slots`) is scratch space for padding rows.

    With `bucketed` shapes (on by default with CUDA graphs), batch sizes and lengths are rounded up to
    powers of two so that few shapes ever run; CUDA graphs are captured per shape on first use.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        slots: int,
        max_context: int,
        cuda_graphs: Optional[bool] = None,
        bucketed: Optional[bool] = None,
        initial_capacity: int = 256,
        max_graph_prefill_tokens: int = 4096,
        compile: Union[bool, str] = False,
        fuse: Optional[bool] = None,
    ) -> None:
        import torch

        self.model = model
        self.fused, self.regional, compile_mode = self._fuse_and_compile(model, fuse, compile, slots)
        layers, kv_heads, head_dim, self.vocab_size = _geometry(model)
        parameter = next(model.parameters())
        self.device, self.dtype = parameter.device, parameter.dtype
        self.max_context = max_context
        self.cache_keyword = kv_cache_keyword(model)
        self.last_only = last_logits_only(model)
        self.slots = slots
        self.cache = SlotKVCache(
            layers,
            slots + 1,
            kv_heads,
            head_dim,
            dtype=self.dtype,
            device=self.device,
            capacity=min(max_context, initial_capacity),
        )
        self.input_ids = torch.zeros((slots + 1, 1), dtype=torch.long, device=self.device)
        self.positions = torch.zeros((slots + 1, 1), dtype=torch.long, device=self.device)
        self.prompt_lengths = torch.zeros(slots + 1, dtype=torch.long, device=self.device)
        self.active = torch.zeros(slots + 1, dtype=torch.bool, device=self.device)
        self._key_positions = torch.arange(self.cache.capacity, device=self.device)
        self.use_graphs = self.device.type == "cuda" and cuda_graphs is not False
        if cuda_graphs and self.device.type != "cuda":
            logger.warning("cuda_graphs=True ignored: the model is on %s, not CUDA", self.device)
        self.bucketed = self.use_graphs if bucketed is None else bucketed
        self.max_graph_prefill_tokens = max_graph_prefill_tokens
        self._graphs: Dict[Hashable, _Graph] = {}
        self._pool: Any = None
        self._weights_fingerprint = self._fingerprint()
        self.graphs_captured = 0
        self._compiled: Optional[Callable[..., torch.Tensor]] = None
        if compile_mode == "model":
            self._compiled = torch.compile(self._call_model, dynamic=True)

    @staticmethod
    def _fuse_and_compile(
        model: Any, fuse: Optional[bool], compile: Union[bool, str], slots: int
    ) -> Tuple[Optional[FusedLayers], Optional[RegionalCompile], Optional[str]]:
        """The fused layers (`fused.py`), their regional compilation (`regional.py`) and the compile mode:
        "regional" (`compile=True`), "model" (the whole forward, `compile="model"`) or None. On CPU without
        regional compilation the fused layers serve from oneDNN-prepacked weights (measured faster)."""
        import torch

        mode = {False: None, True: "regional", "regional": "regional", "model": "model"}.get(compile, "invalid")
        if mode == "invalid":
            raise ValueError(f"compile must be True, False, 'regional' or 'model', got {compile!r}")
        parameter = next(model.parameters())
        if fuse is None:  # on by default where it costs no memory; on CPU the prepacked copies add the weights' size
            fuse = parameter.device.type == "cuda"
        fused = fuse_layers(model) if fuse or mode == "regional" else None
        if mode != "regional" or fused is None:
            cpu = parameter.device.type == "cpu" and torch.backends.mkldnn.is_available()
            if fused is not None and fused.active and mode is None and cpu and parameter.dtype != torch.float16:
                fused.pack(batch_hint=slots)
            return fused, None, mode
        if not fused.active:
            logger.warning("regional compile off: %s; decoding eagerly", fused.reason)
            return fused, None, None
        return fused, RegionalCompile(fused), mode

    def warm_up(self) -> float:
        """Compile what regional compilation will need (prefill and decode, one row and more) on the scratch
        slot, before any request waits for it; returns the seconds spent (0 without regional compile)."""
        import time

        import torch

        if self.regional is None:
            return 0.0
        started = time.perf_counter()
        was_training = self.model.training
        self.model.eval()  # the fused layers run the model's own code in training mode
        with torch.inference_mode():
            for rows, width in ((1, 2), (2, 2), (1, 1), (2, 1)):
                ids = torch.zeros((rows, width), dtype=torch.long, device=self.device)
                positions = torch.arange(width, device=self.device).repeat(rows, 1)
                scratch = torch.full((rows,), self.slots, dtype=torch.long, device=self.device)
                self._forward(ids, positions, self.kv_bucket(width), scratch)
        self.model.train(was_training)
        elapsed = time.perf_counter() - started
        logger.info(
            "regional compile warm-up: %.1f s (%s)",
            elapsed,
            ", ".join(f"{k} {v:.1f} s" for k, v in self.regional.compile_s.items()) or "cached",
        )
        return elapsed

    # Shapes -------------------------------------------------------------------------------------------

    def kv_bucket(self, needed: int) -> int:
        """How many key positions a forward attends over when the furthest row writes position `needed - 1`
        (grows the cache when needed). Bucketed: a power of two; else rounded to 16."""
        self.ensure_capacity(needed)
        if self.bucketed:
            return bucket(needed, 64, self.cache.capacity)
        return min(-(-needed // 16) * 16, self.cache.capacity)

    def batch_bucket(self, rows: int) -> int:
        return bucket(rows, 1, self.slots) if self.bucketed else rows

    def ensure_capacity(self, needed: int) -> None:
        """Grow the cache (doubling, up to `max_context`) so a slot can hold `needed` positions."""
        import torch

        if needed <= self.cache.capacity:
            return
        if needed > self.max_context:
            raise ValueError(f"a sequence needs {needed} positions but the context is {self.max_context}")
        self._forget_graphs()  # they point at the old buffers
        self.cache.grow(bucket(needed, self.cache.capacity, self.max_context))
        self._key_positions = torch.arange(self.cache.capacity, device=self.device)

    # Forward passes -----------------------------------------------------------------------------------

    def _forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_len: int,
        slots: Optional[torch.Tensor] = None,
        compiled: bool = False,
    ) -> torch.Tensor:
        import torch

        keys = self._key_positions[:kv_len].view(1, 1, 1, kv_len)
        visible = keys <= positions.unsqueeze(1).unsqueeze(-1)
        mask = torch.where(visible, 0.0, torch.finfo(self.dtype).min).to(self.dtype)
        if compiled and self._compiled is not None:
            try:
                return self._compiled(input_ids, positions, mask, slots)
            except Exception:  # a model torch.compile cannot handle still serves, eagerly
                logger.warning("torch.compile failed for the decode step; decoding without it", exc_info=True)
                self._compiled = None
        return self._call_model(input_ids, positions, mask, slots)

    def _call_model(
        self, input_ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, slots: Optional[torch.Tensor]
    ) -> torch.Tensor:
        # The key length comes from the mask's shape, so a compiled step sees it as a dynamic size.
        self.cache.bind(positions, mask.shape[-1], slots)
        out = self.model(
            input_ids=input_ids,
            position_ids=positions,
            attention_mask=mask,
            use_cache=True,
            **{self.cache_keyword: self.cache},
            **self.last_only,
        )
        return out.logits[:, -1, :].float()

    def prefill(
        self, slots: Sequence[int], tokens: Sequence[List[int]], starts: Sequence[int], key: Hashable = None
    ) -> torch.Tensor:
        """Write `tokens[i]` into slot `slots[i]` from position `starts[i]` on; the logits after each row's
        last token, `[rows, vocab]`. `key` names what else shapes the computation (the LoRA adapter).

        Rows are left-padded to one length; a pad is written after its row's tokens (where the row's own
        later tokens overwrite it) and attends only to what its row holds, so it changes nothing. Bucketed,
        padding rows fill the scratch slot.
        """
        import torch

        n, width = len(tokens), max(len(t) for t in tokens)
        rows, width = (self.batch_bucket(n), bucket(width, 16, self.max_context)) if self.bucketed else (n, width)
        kv_len = self.kv_bucket(max(list(starts) + [0]) + width)
        ids = torch.zeros((rows, width), dtype=torch.long)
        positions = torch.arange(width, dtype=torch.long).repeat(rows, 1)
        index = torch.full((rows,), self.slots, dtype=torch.long)
        for i, (row, start) in enumerate(zip(tokens, starts, strict=True)):
            pad = width - len(row)
            ids[i, pad:] = torch.tensor(row, dtype=torch.long)
            positions[i, pad:] = torch.arange(start, start + len(row))
            positions[i, :pad] = torch.arange(start + len(row), start + len(row) + pad)
            index[i] = slots[i]

        def run(ids: torch.Tensor, positions: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
            return self._forward(ids, positions, kv_len, index)

        inputs = (ids, positions, index)
        if not self.use_graphs or rows * width > self.max_graph_prefill_tokens:
            return run(*(t.to(self.device) for t in inputs))[:n]
        return self._replay(("prefill", key, rows, width, kv_len), run, inputs)[:n]

    def decode_step(
        self, batch: int, kv_len: int, sampling: SlotSampling, mode: SamplingMode, key: Hashable = None
    ) -> DeviceTokens:
        """One token for each slot `0..batch-1`: forward from `input_ids` at `positions`, sample, and move
        the `active` rows to their token (the others keep theirs). `key` names the LoRA adapter."""

        def step() -> DeviceTokens:
            logits = self._forward(self.input_ids[:batch], self.positions[:batch], kv_len, compiled=True)
            counters = self.positions[:batch, 0] - self.prompt_lengths[:batch] + 1
            active = self.active[:batch]
            out = sample_device(logits, sampling, slice(0, batch), counters, active, mode)
            ids = self.input_ids[:batch, 0]
            ids.copy_(out.token_ids.where(active, ids))
            self.positions[:batch, 0] += active.long()
            return out

        if not self.use_graphs:
            return step()
        state = [self.input_ids, self.positions] + ([sampling.counts] if sampling.counts is not None else [])
        return self._replay(("decode", key, batch, kv_len, mode), lambda: step(), (), state)

    def _replay(
        self,
        shape: Hashable,
        run: Callable[..., Any],
        host_inputs: Tuple[torch.Tensor, ...],
        state: Sequence[torch.Tensor] = (),
    ) -> Any:
        """Run `run(*inputs)` as a CUDA graph captured for `shape` (captured now if new; eager on failure).

        `state`: tensors `run` updates in place, put back after the warm-up run that precedes a capture.
        """
        graph = self._graphs.get(shape)
        if graph is None:
            inputs = tuple(t.to(self.device) for t in host_inputs)
            graph = self._capture(run, inputs, state)
            if graph is None:
                return run(*inputs)
            self._graphs[shape] = graph
        for static, value in zip(graph.inputs, host_inputs, strict=True):
            static.copy_(value, non_blocking=True)
        graph.graph.replay()
        return graph.output

    def _capture(
        self, run: Callable[..., Any], inputs: Tuple[torch.Tensor, ...], state: Sequence[torch.Tensor]
    ) -> Optional[_Graph]:
        import torch

        saved = [t.clone() for t in state]
        try:
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up: lazy initialisation must not happen during capture
                run(*inputs)
            torch.cuda.current_stream().wait_stream(side)
            for tensor, value in zip(state, saved, strict=True):
                tensor.copy_(value)
            graph = torch.cuda.CUDAGraph()
            # thread_local: a learner training on another thread (async GRPO) may use CUDA meanwhile.
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                output = run(*inputs)
        except Exception:
            logger.warning("CUDA graph capture failed; running eagerly from now on", exc_info=True)
            torch.cuda.synchronize()
            for tensor, value in zip(state, saved, strict=True):
                tensor.copy_(value)
            self.use_graphs = False
            self._graphs.clear()
            return None
        self.graphs_captured += 1
        return _Graph(graph, output, inputs)

    # Slots --------------------------------------------------------------------------------------------

    def set_active(self, rows: Sequence[int]) -> None:
        """Mark the slots that decode in the next step (the others sit it out)."""
        import torch

        mask = torch.zeros(self.slots + 1, dtype=torch.bool)
        if rows:
            mask[list(rows)] = True
        self.active.copy_(mask, non_blocking=True)

    def move(self, src: int, dst: int, length: int) -> None:
        """Move a running sequence from slot `src` to slot `dst` (compaction keeps the decoded range short)."""
        self.cache.copy(src, dst, length)
        for buffer in (self.input_ids, self.positions, self.prompt_lengths):
            buffer[dst] = buffer[src]

    # Weights ------------------------------------------------------------------------------------------

    def _fingerprint(self) -> Tuple[int, ...]:
        return tuple(p.data_ptr() for p in self.model.parameters())

    def weights_changed(self) -> None:
        """Forget captured graphs if the weights moved to new storage (an in-place copy keeps them valid)."""
        if self.fused is not None:
            self.fused.refresh()  # weights that moved are fused again (new storage: new fingerprint)
        fingerprint = self._fingerprint()
        if fingerprint != self._weights_fingerprint:
            self._forget_graphs()
            self._weights_fingerprint = fingerprint

    def _forget_graphs(self) -> None:
        import torch

        if self._graphs and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # a step may still be replaying one
        self._graphs.clear()
