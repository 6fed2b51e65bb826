"""`TinkerService`: the state behind the Tinker routes - sessions, base models, training runs, checkpoints,
sampling sessions - and one method per call. Each training call is queued as a future (`futures.py`)."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ..serving.models import SMOLLM2_ALIAS, smollm2_cache_folder
from .config import TinkerConfig
from .errors import TinkerGone, TinkerNotFound, TinkerUserError
from .futures import FutureTable, Outcome
from .runs import LoraSettings, TrainingRun, read_run_file, weights_fingerprint
from .sampler import SamplerPool, ServedPolicy, sample
from .wire import ForwardBackwardCall, encode_forward_backward_output, encode_sample_response, tokens_of_chunks

if TYPE_CHECKING:
    from ..store.base import LightningStore
    from .recording import SessionRecorder

__all__ = ["TinkerService", "CheckpointRecord", "parse_tinker_path"]

logger = logging.getLogger(__name__)

_KINDS = {"weights": "training", "sampler_weights": "sampler"}
_TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")


def parse_tinker_path(path: str) -> Tuple[str, str, str]:
    """`(run id, kind folder, name)` of `tinker://<run>/<weights|sampler_weights>/<name>`."""
    parts = path[len("tinker://") :].split("/") if path.startswith("tinker://") else []
    if len(parts) != 3 or parts[1] not in _KINDS or not parts[0] or not parts[2]:
        raise TinkerUserError(
            f"{path!r} is not a checkpoint path; expected tinker://<run>/weights/<name> or "
            "tinker://<run>/sampler_weights/<name>"
        )
    return parts[0], parts[1], parts[2]


@dataclass
class CheckpointRecord:
    run_id: str
    kind: str
    name: str
    time: datetime
    user_metadata: Optional[Dict[str, str]] = None
    weights_version: Optional[int] = None
    """Sampler checkpoints: the version the run's live policy serves them as."""
    fingerprint: Optional[str] = None

    @property
    def path(self) -> str:
        return f"tinker://{self.run_id}/{self.kind}/{self.name}"

    def as_json(self) -> Dict[str, Any]:
        return {
            "checkpoint_id": f"{self.kind}/{self.name}",
            "checkpoint_type": _KINDS[self.kind],
            "time": self.time.isoformat(),
            "tinker_path": self.path,
            "public": False,
            "user_metadata": self.user_metadata,
        }


@dataclass
class _SamplingSession:
    session_id: str
    model_path: Optional[str]
    base_model: str
    owner: Optional[str] = None
    """The client session that created it."""


@dataclass
class _Session:
    tags: List[str]
    created: float
    last_heartbeat: float
    models: List[str] = field(default_factory=lambda: [])
    finished: bool = False


class TinkerService:
    """Everything `agl tinker` serves (see docs/tinker.md); the HTTP routes are in `app.py`."""

    def __init__(self, config: TinkerConfig, store: Optional[LightningStore] = None) -> None:
        self.config = config
        self.futures = FutureTable()
        self.samplers = SamplerPool(
            max_frozen=config.max_frozen_samplers,
            default_max_tokens=config.default_max_tokens,
            max_batch_size=config.max_batch_size,
        )
        self.root = Path(config.checkpoint_dir)
        self.sessions: Dict[str, _Session] = {}
        self.runs: Dict[str, TrainingRun] = {}
        self.checkpoints: Dict[str, List[CheckpointRecord]] = {}
        self.sampling_sessions: Dict[str, _SamplingSession] = {}
        self._bases: Dict[str, Tuple[Any, Any]] = {}
        self._base_lock = threading.Lock()
        self._ephemeral = itertools.count(1)
        self.recorder: Optional[SessionRecorder] = None
        if store is not None:
            from .recording import SessionRecorder

            self.recorder = SessionRecorder(store)

    # Models ------------------------------------------------------------------------------------------

    def source_of(self, base_model: str) -> str:
        if base_model not in self.config.models:
            raise TinkerUserError(
                f"base_model {base_model!r} is not served here; choose one of {sorted(self.config.models)}"
            )
        return self.config.models[base_model]

    def base(self, base_model: str) -> Tuple[Any, Any]:
        """`(model, tokenizer)` of a served base model, loaded on first use (float32, eval mode); names with
        the same source share one copy."""
        source = self.source_of(base_model)
        with self._base_lock:
            if source not in self._bases:
                from ..serving.models import load_causal_lm

                self._bases[source] = load_causal_lm(source, device=self.config.device)
            return self._bases[source]

    def tokenizer_folder(self, base_model: str) -> str:
        """A local folder holding the base model's tokenizer, sent as `get_info`'s `tokenizer_id`: the SDK's
        `get_tokenizer()` calls `AutoTokenizer.from_pretrained` on it, which must not need the Hub.

        The model folder itself when it has a tokenizer, the converted SmolLM2 for "smollm2", else a copy
        saved once under the checkpoint dir (a hub id, a .gguf file)."""
        source = self.source_of(base_model)
        candidates = [Path(source)]
        if source == SMOLLM2_ALIAS:
            cache = smollm2_cache_folder()
            candidates = [cache] if cache is not None else []
        for folder in candidates:
            if folder.is_dir() and any((folder / name).is_file() for name in _TOKENIZER_FILES):
                return str(folder.resolve())
        copy = self.root / "tokenizers" / hashlib.sha256(source.encode()).hexdigest()[:16]
        if not (copy / "tokenizer_config.json").is_file():
            _, tokenizer = self.base(base_model)
            tokenizer.save_pretrained(copy)
        return str(copy.resolve())

    def capabilities(self) -> Dict[str, Any]:
        supported: List[Dict[str, Any]] = []
        for name in self.config.models:
            supported.append({"model_name": name, "trainable": True, "sampleable": True})
        return {"supported_models": supported}

    def run(self, model_id: str) -> TrainingRun:
        if model_id not in self.runs:
            raise TinkerNotFound(f"model_id {model_id!r} is unknown here; create it with create_model first")
        return self.runs[model_id]

    # Sessions ----------------------------------------------------------------------------------------

    def create_session(self, body: Dict[str, Any]) -> Dict[str, Any]:
        session_id = f"session-{uuid.uuid4().hex[:12]}"
        now = time.time()
        self.sessions[session_id] = _Session(tags=list(body.get("tags") or []), created=now, last_heartbeat=now)
        return {"type": "create_session", "session_id": session_id}

    def heartbeat(self, session_id: str) -> Dict[str, Any]:
        session = self.sessions.get(session_id)
        if session is None:
            raise TinkerNotFound(f"session {session_id!r} is unknown here; create_session first")
        if session.finished:
            raise TinkerGone(f"session {session_id!r} has finished")
        session.last_heartbeat = time.time()
        return {"type": "session_heartbeat"}

    async def finish_session(self, session_id: str) -> Dict[str, Any]:
        """The client is done: its session ends (its runs and checkpoints stay); recorded sampling sessions
        become succeeded rollouts."""
        self._session(session_id).finished = True
        if self.recorder is not None:
            mine = [s.session_id for s in self.sampling_sessions.values() if s.owner == session_id]
            await self.recorder.finish(mine)
        return {}

    def _session(self, session_id: str) -> _Session:
        if session_id not in self.sessions:
            raise TinkerNotFound(f"session {session_id!r} is unknown here; create_session first")
        return self.sessions[session_id]

    # Training calls (queued) -------------------------------------------------------------------------

    def create_model(self, body: Dict[str, Any]) -> Dict[str, Any]:
        session = self._session(str(body.get("session_id")))
        base_model = str(body.get("base_model") or "")
        self.source_of(base_model)
        lora = LoraSettings.from_request(body.get("lora_config"))
        run_id = f"run-{uuid.uuid4().hex[:12]}"
        session.models.append(run_id)

        def work() -> Outcome:
            model, tokenizer = self.base(base_model)
            self.runs[run_id] = TrainingRun(
                run_id, base_model, model, tokenizer, lora, self.root / run_id, device=self.config.device
            )
            self.checkpoints[run_id] = []
            return Outcome(json={"type": "create_model", "model_id": run_id})

        return {"request_id": self.futures.submit_training("create_model", work), "model_id": run_id}

    def get_info(self, body: Dict[str, Any]) -> Dict[str, Any]:
        run = self.run(str(body.get("model_id")))
        model: Any = run.learner.policy
        arch = type(model.get_base_model() if hasattr(model, "get_base_model") else model).__name__
        return {
            "type": "get_info",
            "model_id": run.run_id,
            "model_data": {
                "arch": arch,
                "model_name": run.base_model,
                "tokenizer_id": self.tokenizer_folder(run.base_model),
            },
            "is_lora": run.lora.rank > 0,
            "lora_rank": run.lora.rank or None,
            "model_name": run.base_model,
        }

    def forward_backward(self, call: ForwardBackwardCall) -> Dict[str, Any]:
        run = self.run(call.model_id)

        def work() -> Outcome:
            outputs, metrics = run.forward_backward(call)
            return Outcome(protobuf=encode_forward_backward_output(outputs, metrics))

        kind = "forward" if call.forward_only else "forward_backward"
        return {"request_id": self.futures.submit_training(kind, work), "model_id": run.run_id}

    def optim_step(self, body: Dict[str, Any]) -> Dict[str, Any]:
        run = self.run(str(body.get("model_id")))
        adam = body.get("adam_params") or body.get("optim_params") or {}
        if not isinstance(adam, dict) or adam.get("type", "adam") not in ("adam", "adamw"):
            raise TinkerUserError(f"optim_step supports Adam parameters only, got {body.get('optimizer_params')!r}")

        def work() -> Outcome:
            return Outcome(json={"type": "optim_step", "metrics": run.optim_step(adam)})

        return {"request_id": self.futures.submit_training("optim_step", work), "model_id": run.run_id}

    def save_weights(self, body: Dict[str, Any], *, for_sampler: bool) -> Dict[str, Any]:
        run = self.run(str(body.get("model_id")))
        name = body.get("path")
        session_seq = body.get("sampling_session_seq_id")
        if name is None:
            if not for_sampler or session_seq is None:
                raise TinkerUserError("save_weights needs a path (the checkpoint name)")
            name = f"ephemeral-{next(self._ephemeral):04d}"
        name = str(name)
        if not name or "/" in name or name.startswith("."):
            raise TinkerUserError(f"checkpoint name {name!r} must be non-empty, without '/' and not start with '.'")
        kind = "sampler_weights" if for_sampler else "weights"
        record = CheckpointRecord(run.run_id, kind, name, datetime.now(timezone.utc), body.get("user_metadata"))
        base_model = run.base_model
        owner = next((sid for sid, session in self.sessions.items() if run.run_id in session.models), None)

        def work() -> Outcome:
            run.save(kind, name)
            if for_sampler:
                weights = run.merged_weights()
                record.fingerprint = weights_fingerprint(weights)
                model, tokenizer = self.base(base_model)
                record.weights_version = self.samplers.publish(
                    run.run_id, record.path, weights, record.fingerprint, lambda: (model, tokenizer, run.run_id)
                )
            records = self.checkpoints.setdefault(run.run_id, [])
            records[:] = [r for r in records if r.path != record.path] + [record]  # a saved-again name is replaced
            if for_sampler and body.get("path") is None:
                sampling_id = self._new_sampling_session(record.path, base_model, owner)
                return Outcome(json={"type": "save_weights_for_sampler", "sampling_session_id": sampling_id})
            reply_type = "save_weights_for_sampler" if for_sampler else "save_weights"
            return Outcome(json={"type": reply_type, "path": record.path})

        return {"request_id": self.futures.submit_training(kind, work), "model_id": run.run_id}

    def _folder(self, path: str) -> Tuple[str, Path]:
        run_id, kind, name = parse_tinker_path(path)
        folder = self.root / run_id / kind / name
        if not folder.is_dir():
            raise TinkerNotFound(f"checkpoint {path} does not exist on this server")
        return run_id, folder

    def load_weights(self, body: Dict[str, Any]) -> Dict[str, Any]:
        path = str(body.get("path") or "")
        source_run, folder = self._folder(path)
        optimizer = bool(body.get("optimizer", False))
        if body.get("model_id"):
            run = self.run(str(body["model_id"]))

            def work() -> Outcome:
                run.load(folder, optimizer=optimizer)
                return Outcome(json={"type": "load_weights", "path": path, "model_id": run.run_id})

            return {"request_id": self.futures.submit_training("load_weights", work), "model_id": run.run_id}
        # A new training client from a checkpoint: create the model with the checkpoint's settings, then load.
        saved = read_run_file(self.root / source_run)
        created = self.create_model(
            {
                "session_id": body.get("session_id"),
                "base_model": body.get("base_model") or saved["base_model"],
                "lora_config": {**saved["lora"], "rank": saved["lora"]["rank"]} if saved["lora"]["rank"] else None,
            }
        )
        model_id = created["model_id"]

        def load() -> Outcome:
            self.runs[model_id].load(folder, optimizer=optimizer)
            return Outcome(json={"type": "load_weights", "path": path, "model_id": model_id})

        return {"request_id": self.futures.submit_training("load_weights", load), "model_id": model_id}

    # Checkpoints -------------------------------------------------------------------------------------

    def list_checkpoints(self, run_id: str) -> Dict[str, Any]:
        if run_id not in self.checkpoints:
            raise TinkerNotFound(f"training run {run_id!r} is unknown here")
        return {"checkpoints": [c.as_json() for c in self.checkpoints[run_id]], "cursor": None}

    def training_run(self, run_id: str) -> Dict[str, Any]:
        run = self.run(run_id)
        records = self.checkpoints.get(run_id, [])
        last = {kind: next((c.as_json() for c in reversed(records) if c.kind == kind), None) for kind in _KINDS}
        return {
            "training_run_id": run_id,
            "base_model": run.base_model,
            "model_owner": "local",
            "is_lora": run.lora.rank > 0,
            "lora_rank": run.lora.rank or None,
            "last_request_time": datetime.now(timezone.utc).isoformat(),
            "last_checkpoint": last["weights"],
            "last_sampler_checkpoint": last["sampler_weights"],
        }

    def weights_info(self, path: str) -> Dict[str, Any]:
        run_id, _ = self._folder(path)
        saved = read_run_file(self.root / run_id)
        rank = int(saved["lora"]["rank"])
        return {"base_model": saved["base_model"], "is_lora": rank > 0, "lora_rank": rank or None}

    def checkpoint(self, path: str) -> CheckpointRecord:
        run_id, _kind, _name = parse_tinker_path(path)
        for record in self.checkpoints.get(run_id, []):
            if record.path == path:
                return record
        raise TinkerNotFound(f"checkpoint {path} is unknown to this server")

    # Sampling ----------------------------------------------------------------------------------------

    def _new_sampling_session(self, model_path: Optional[str], base_model: str, owner: Optional[str]) -> str:
        session_id = f"sampler-{uuid.uuid4().hex[:12]}"
        self.sampling_sessions[session_id] = _SamplingSession(session_id, model_path, base_model, owner)
        return session_id

    def create_sampling_session(self, body: Dict[str, Any]) -> Dict[str, Any]:
        self._session(str(body.get("session_id")))
        model_path = body.get("model_path")
        if model_path:
            run_id, _ = self._folder(str(model_path))
            base_model = str(read_run_file(self.root / run_id)["base_model"])
        else:
            base_model = str(body.get("base_model") or "")
            self.source_of(base_model)
        session_id = self._new_sampling_session(model_path, base_model, str(body.get("session_id")))
        return {"type": "create_sampling_session", "sampling_session_id": session_id}

    def sampler_info(self, sampler_id: str) -> Dict[str, Any]:
        target = self.sampling_sessions.get(sampler_id)
        if target is None:
            raise TinkerNotFound(f"sampling session {sampler_id!r} is unknown here")
        return {"sampler_id": sampler_id, "base_model": target.base_model, "model_path": target.model_path}

    def policy_for(self, model_path: Optional[str], base_model: str) -> ServedPolicy:
        """The policy server that samples `model_path` (or the base model): the run's live one when it
        serves that checkpoint now, else a frozen one loaded from disk."""
        model, tokenizer = self.base(base_model)
        if not model_path:
            return self.samplers.base_policy(base_model, model, tokenizer)
        run_id, folder = self._folder(model_path)
        found = self.samplers.for_path(model_path, run_id)
        if found is not None:
            return found
        saved = read_run_file(self.root / run_id)
        lora = LoraSettings(**saved["lora"])
        loader = TrainingRun(run_id, base_model, model, tokenizer, lora, self.root / run_id, device=self.config.device)
        loader.load(folder, optimizer=False)
        weights = loader.merged_weights()
        served = copy_model_with(model, weights)
        return self.samplers.add_frozen(model_path, served, tokenizer, model_path, weights_fingerprint(weights))

    def asample(self, body: Dict[str, Any]) -> Dict[str, Any]:
        session_id = body.get("sampling_session_id")
        if session_id:
            if session_id not in self.sampling_sessions:
                raise TinkerNotFound(f"sampling session {session_id!r} is unknown here")
            target = self.sampling_sessions[str(session_id)]
            model_path, base_model = target.model_path, target.base_model
        else:
            model_path = body.get("model_path")
            base_model = str(body.get("base_model") or "")
        prompt = tokens_of_chunks((body.get("prompt") or {}).get("chunks") or [])
        if not prompt:
            raise TinkerUserError("prompt has no tokens; send a ModelInput with at least one token")
        params = dict(body.get("sampling_params") or {})
        num_samples = int(body.get("num_samples", 1))
        want_prompt_logprobs = bool(body.get("prompt_logprobs"))
        if int(body.get("topk_prompt_logprobs") or 0) or int(body.get("topk_sample_logprobs") or 0):
            raise TinkerUserError("top-k logprobs are not supported by this server; leave topk_* at 0")

        async def work() -> Outcome:
            started = time.time()
            policy = await asyncio.to_thread(self.policy_for, model_path, base_model)
            sequences, scored, version = await sample(policy, prompt, params, num_samples, want_prompt_logprobs)
            if self.recorder is not None and session_id:
                await self.recorder.record(
                    str(session_id),
                    model_path or base_model,
                    policy.server.engine.tokenizer,
                    prompt,
                    params,
                    sequences,
                    version,
                    started,
                )
            return Outcome(protobuf=encode_sample_response(sequences, scored))

        request_id = self.futures.submit_async("sample", work)
        return {"request_id": request_id, "sample_sequence_ids": [f"{request_id}-{i}" for i in range(num_samples)]}

    def close(self) -> None:
        self.futures.close()
        self.samplers.close()


def copy_model_with(model: Any, weights: Dict[str, Any]) -> Any:
    """A copy of `model` holding `weights` (a plain state dict), for a frozen sampler."""
    import copy

    served = copy.deepcopy(model)
    served.load_state_dict(weights, strict=False)
    return served
