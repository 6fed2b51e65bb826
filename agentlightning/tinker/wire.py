"""The Tinker wire format: protobuf forward/backward requests in, protobuf outputs and samples out.

The SDK sends `forward_backward` as `tinker_public.ForwardBackwardRequest` (optionally zstd-compressed) and
asks for `ForwardBackwardOutput` and `SampleResponse` results as protobuf; every other body is JSON. The
message classes come from the SDK itself (`tinker.proto.tinker_public_pb2`), so both ends share one schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from .errors import TinkerUserError

__all__ = [
    "PROTOBUF",
    "TrainingDatum",
    "ForwardBackwardCall",
    "decode_forward_backward",
    "encode_forward_backward_output",
    "encode_sample_response",
    "tokens_of_chunks",
]

PROTOBUF = "application/x-protobuf"


def _pb() -> Any:
    from tinker.proto import tinker_public_pb2

    return tinker_public_pb2


@dataclass
class TrainingDatum:
    """One datum of a forward/backward call: its input token ids and its named loss inputs."""

    tokens: List[int]
    loss_fn_inputs: Dict[str, np.ndarray]


@dataclass
class ForwardBackwardCall:
    model_id: str
    seq_id: int
    loss_fn: str
    forward_only: bool
    data: List[TrainingDatum]
    loss_fn_config: Dict[str, Union[float, str]] = field(default_factory=lambda: {})


def _tensor(message: Any, name: str) -> np.ndarray:
    pb = _pb()
    dtypes = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}
    dtype = dtypes.get(message.dtype)
    if dtype is None:
        raise TinkerUserError(
            f"loss_fn_inputs[{name!r}] has an unsupported dtype ({message.dtype}); send float32 or int64"
        )
    if message.HasField("sparse_csr"):
        raise TinkerUserError(f"loss_fn_inputs[{name!r}] is sparse; this server takes dense tensors only")
    array = np.frombuffer(message.dense, dtype=dtype)
    shape = list(message.shape)
    if shape and int(np.prod(shape)) == array.size:
        array = array.reshape(shape)
    return array.copy()


def decode_forward_backward(body: bytes) -> ForwardBackwardCall:
    """Parse a protobuf `ForwardBackwardRequest` body (already decompressed)."""
    from google.protobuf.message import DecodeError

    message = _pb().ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise TinkerUserError(f"the forward_backward body is not a tinker ForwardBackwardRequest protobuf: {exc}")
    config: Dict[str, Union[float, str]] = {key: float(value) for key, value in message.loss_fn_config.items()}
    for key, value in message.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
    data: List[TrainingDatum] = []
    for index, datum in enumerate(message.data):
        tokens: List[int] = []
        for chunk in datum.model_input:
            kind = chunk.WhichOneof("chunk")
            if kind != "encoded_text":
                raise TinkerUserError(f"data[{index}] has a {kind} chunk; this server trains on token chunks only")
            tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
        inputs = {name: _tensor(tensor, name) for name, tensor in datum.loss_fn_inputs.items()}
        data.append(TrainingDatum(tokens=tokens, loss_fn_inputs=inputs))
    return ForwardBackwardCall(
        model_id=message.model_id,
        seq_id=int(message.seq_id),
        loss_fn=message.loss_fn,
        forward_only=bool(message.forward_only),
        data=data,
        loss_fn_config=config,
    )


def tokens_of_chunks(chunks: Sequence[Mapping[str, Any]]) -> List[int]:
    """The token ids of a JSON `ModelInput.chunks` list (encoded text chunks only)."""
    tokens: List[int] = []
    for index, chunk in enumerate(chunks):
        kind = chunk.get("type", "encoded_text")
        if kind != "encoded_text":
            raise TinkerUserError(f"prompt chunk {index} is {kind!r}; this server samples from token chunks only")
        tokens.extend(int(t) for t in chunk.get("tokens", []))
    return tokens


def encode_forward_backward_output(
    outputs: Sequence[Mapping[str, np.ndarray]], metrics: Mapping[str, float], output_type: str = "ArrayRecord"
) -> bytes:
    """Per-datum output arrays (e.g. `logprobs`) and metrics as a protobuf `ForwardBackwardOutput`."""
    pb = _pb()
    message = pb.ForwardBackwardOutput(loss_fn_output_type=output_type)
    for key, value in metrics.items():
        message.metrics[key] = float(value)
    if outputs:
        record = message.loss_fn_outputs.add()
        record.num_datums = len(outputs)
        for name in outputs[0]:
            arrays = [np.ascontiguousarray(out[name], dtype=np.float32).reshape(-1) for out in outputs]
            offsets = np.cumsum([0, *[a.nbytes for a in arrays]]).astype(np.int64)
            tensor = record.fields[name]
            tensor.dtype = pb.DTYPE_FLOAT32
            tensor.data = b"".join(a.tobytes() for a in arrays)
            tensor.offsets = offsets.tobytes()
    return message.SerializeToString()


@dataclass
class SampledSequence:
    tokens: List[int]
    logprobs: List[float]
    stop_reason: str
    """"stop" (an eos token or a stop sequence) or "length"."""


def encode_sample_response(sequences: Sequence[SampledSequence], prompt_logprobs: Optional[Sequence[float]]) -> bytes:
    """Sampled sequences (and prompt logprobs when asked, NaN for the first token) as a protobuf `SampleResponse`."""
    pb = _pb()
    message = pb.SampleResponse()
    for sequence in sequences:
        item = message.sequences.add()
        item.stop_reason = pb.STOP_REASON_LENGTH if sequence.stop_reason == "length" else pb.STOP_REASON_STOP
        item.tokens = np.asarray(sequence.tokens, dtype=np.int32).tobytes()
        item.logprobs = np.asarray(sequence.logprobs, dtype=np.float32).tobytes()
    if prompt_logprobs is not None:
        message.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    return message.SerializeToString()
