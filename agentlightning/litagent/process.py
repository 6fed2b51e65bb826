"""`ProcessAgent`: run each rollout as a separate program (any language) that never imports agentlightning.

Per rollout the agent starts, in its own process group, either a command line or a Python class given by
import path (whose `async def run(self)` is awaited in a fresh interpreter). The program gets, through
its environment:

- `AGL_OPENAI_BASE_URL`: an OpenAI-compatible base URL scoped to this rollout attempt (ends in
  `/openai/v1`); every call through it is recorded as an LLM span with token ids;
- `AGL_EVENT_URL`: where it posts `{"event_type": "reward", "data": {"value": 0.7}}` (or other events);
- `AGL_KEY`: the bearer key for both (use it as the OpenAI client's `api_key`);
- `AGL_ROLLOUT_ID`, `AGL_ATTEMPT_ID`, `AGL_MODE`, `AGL_MODEL` (the LLM resource's model, if any),
  `AGL_TASK` (the task as JSON), and one variable per `env_map` entry `{ENV_NAME: task_field}`.

Exit status 0 means the rollout succeeded; a non-zero status, a timeout or a cancellation fails it, with
the exit status and the tail of stderr recorded (attempt metadata `process`, and the exception span).
The whole process group is killed on timeout, cancellation and interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import json
import logging
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from agentlightning.types import LLM, NamedResources, Rollout

from .litagent import LitAgent

if TYPE_CHECKING:
    from agentlightning.gateway import Gateway, GatewayConfig
    from agentlightning.store.base import LightningStore

__all__ = ["ProcessAgent", "ProcessAgentError"]

logger = logging.getLogger(__name__)

ENTRY_MODULE = "agentlightning._process_entry"

_live_groups: set[int] = set()
"""Process groups of running agent processes in this interpreter (killed at exit)."""

_gateway_start_lock = threading.Lock()
"""Serialises starting gateways: runner threads sharing one agent must end up sharing one gateway."""


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@atexit.register
def _kill_live_groups() -> None:
    for pgid in list(_live_groups):
        _kill_group(pgid, signal.SIGKILL)
    _live_groups.clear()


class ProcessAgentError(RuntimeError):
    """The agent process failed: non-zero exit, timeout or cancellation (message carries the stderr tail)."""

    def __init__(self, message: str, *, exit_code: Optional[int], reason: str, stderr_tail: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.reason = reason
        self.stderr_tail = stderr_tail

    @property
    def timeout_location(self) -> Optional[str]:
        """ "rollout" when the process ran out of its time (see `semconv.AGL_TIMEOUT_LOCATION`), else None."""
        return "rollout" if self.reason == "timeout" else None


def _check_env_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not name or "=" in name or "\0" in name:
        raise ValueError(f"{where}: {name!r} is not a valid environment variable name")
    return name


def _looks_like_class_target(word: str) -> bool:
    """`file.py:Class` or `pkg.mod:Class`: an `agent_class` target, not a program to run."""
    where, sep, name = word.rpartition(":")
    if not sep or not where or not name.isidentifier() or "/" in name:
        return False
    return where.endswith(".py") or all(part.isidentifier() for part in where.split("."))


def _env_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


class ProcessAgent(LitAgent[Any]):
    """Runs every rollout as a child process; accepted wherever a `LitAgent` is.

    Args:
        command: the program, as a string (split like a shell would) or an argument list, e.g.
            `["node", "agent.mjs"]`. Exactly one of `command` / `agent_class`. A lone `file.py:Class` or
            `pkg.mod:Class` is refused here (it names a class: pass it as `agent_class`).
        agent_class: `"package.module:Class"` or `"path/to/file.py:Class"`; a fresh Python (`python`)
            instantiates it and awaits its `run()` (a returned number is posted as the reward).
        env_map: `{ENV_NAME: task_field}`; the task must then be a mapping holding those fields. Strings
            are passed as is, other values JSON-encoded.
        env: extra fixed environment variables (the parent's environment is inherited).
        cwd: working directory of the process.
        timeout_seconds: per-rollout limit (default: the rollout's `config.timeout_seconds`, else none).
        gateway: None starts a `Gateway` in this process over the runner's store (one per store); a
            `Gateway` is used as given; a URL string names a running `agl gateway` (with `gateway_secret`
            or `$AGL_GATEWAY_SECRET`, the secret it was started with).
        gateway_config: configuration of the gateway this agent starts (when `gateway` is None).
        kill_grace_seconds: after SIGTERM to the process group, how long before SIGKILL.
        stderr_tail_chars: how much of the end of stderr is kept for failure reports.
        echo_stderr: also copy the process's stderr to this process's stderr (stdout is inherited).
    """

    def __init__(
        self,
        command: Optional[Union[str, Sequence[str]]] = None,
        *,
        agent_class: Optional[str] = None,
        env_map: Optional[Mapping[str, str]] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[Union[str, os.PathLike[str]]] = None,
        timeout_seconds: Optional[float] = None,
        gateway: Optional[Union[Gateway, str]] = None,
        gateway_secret: Optional[str] = None,
        gateway_config: Optional[GatewayConfig] = None,
        python: str = sys.executable,
        kill_grace_seconds: float = 5.0,
        stderr_tail_chars: int = 4000,
        echo_stderr: bool = True,
    ) -> None:
        super().__init__()
        if os.name != "posix":
            raise RuntimeError("ProcessAgent needs a POSIX system: it runs each agent in its own process group")
        if (command is None) == (agent_class is None):
            raise ValueError(
                "ProcessAgent needs exactly one of command=... (any program) or agent_class='pkg.mod:Class'"
            )
        if command is not None:
            argv = shlex.split(command) if isinstance(command, str) else list(command)
            if not argv or not all(isinstance(part, str) and part for part in argv):
                raise ValueError(f"command must be a non-empty string or list of non-empty strings, got {command!r}")
            if len(argv) == 1 and _looks_like_class_target(argv[0]):
                raise ValueError(
                    f"ProcessAgent({command!r}) would run {argv[0]!r} as a program; for a Python class use "
                    f"ProcessAgent(agent_class={argv[0]!r})"
                )
        else:
            assert agent_class is not None
            from agentlightning._process_entry import split_target

            where, _ = split_target(agent_class)
            if where.endswith(".py") and not Path(cwd or ".", where).is_file():
                raise ValueError(f"agent_class file {where!r} does not exist (relative to {str(cwd or os.getcwd())!r})")
            argv = [python, "-m", ENTRY_MODULE, agent_class]
        self.argv: list[str] = argv
        self.agent_class = agent_class
        self.env_map = {_check_env_name(k, "env_map"): str(v) for k, v in (env_map or {}).items()}
        self.env = {_check_env_name(k, "env"): str(v) for k, v in (env or {}).items()}
        self.cwd = os.fspath(cwd) if cwd is not None else None
        if timeout_seconds is not None and timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be > 0 (or None), got {timeout_seconds}")
        self.timeout_seconds = timeout_seconds
        if kill_grace_seconds < 0:
            raise ValueError(f"kill_grace_seconds must be >= 0, got {kill_grace_seconds}")
        self.kill_grace_seconds = kill_grace_seconds
        self.stderr_tail_chars = stderr_tail_chars
        self.echo_stderr = echo_stderr
        if isinstance(gateway, str):
            gateway_secret = gateway_secret or os.environ.get("AGL_GATEWAY_SECRET")
            if not gateway_secret:
                raise ValueError(
                    f"ProcessAgent(gateway={gateway!r}) needs gateway_secret=... (or $AGL_GATEWAY_SECRET), the "
                    "secret that `agl gateway` was started with, to hand out attempt keys"
                )
        self.gateway = gateway
        self.gateway_secret = gateway_secret
        self.gateway_config = gateway_config
        self._own_gateways: dict[int, Gateway] = {}
        self._running_groups: set[int] = set()
        self._closes = 0  # how many times close() ran: a rollout spawning across a close() is killed too

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        # Gateways started here serve only this process; a copy in another process starts its own.
        state["_own_gateways"] = {}
        state["_running_groups"] = set()
        gateway = state.get("gateway")
        if gateway is not None and not isinstance(gateway, str):
            state["gateway"], state["gateway_secret"] = gateway.endpoint, gateway.secret
        return state

    def is_async(self) -> bool:
        return True

    # ---- gateway ----

    def _store(self) -> LightningStore:
        try:
            return self.get_runner().get_store()  # type: ignore[attr-defined]
        except (ValueError, RuntimeError, AttributeError) as exc:
            raise RuntimeError(
                "ProcessAgent without a gateway needs a runner with a store (run it through Trainer or a "
                f"LitAgentRunner), or pass gateway=Gateway(store) / an `agl gateway` URL: {exc}"
            ) from None

    async def _gateway_endpoint(self) -> tuple[str, str]:
        """(root URL, secret) of the gateway serving this agent's rollouts, starting one if needed."""
        if isinstance(self.gateway, str):
            assert self.gateway_secret is not None
            return self.gateway.rstrip("/"), self.gateway_secret
        if self.gateway is not None:
            if not self.gateway.is_running():
                await self.gateway.start()
            return self.gateway.endpoint, self.gateway.secret
        store = self._store()
        gateway = self._own_gateways.get(id(store))
        if gateway is None or not gateway.is_running():
            gateway = await asyncio.to_thread(self._start_own_gateway, store)
        return gateway.endpoint, gateway.secret

    def _start_own_gateway(self, store: LightningStore) -> Gateway:
        """The gateway of `store` in this process, started on first use (it serves from its own thread)."""
        with _gateway_start_lock:
            gateway = self._own_gateways.get(id(store))
            if gateway is not None and gateway.is_running():
                return gateway
            from agentlightning.gateway import Gateway

            gateway = Gateway(store, self.gateway_config, launch_mode="thread")
            asyncio.run(gateway.start())
            self._own_gateways[id(store)] = gateway
            return gateway

    async def close(self) -> None:
        """Kill the process groups of rollouts still running and stop the gateways this agent started."""
        self._closes += 1
        for pgid in list(self._running_groups):
            _kill_group(pgid, signal.SIGKILL)
        gateways, self._own_gateways = list(self._own_gateways.values()), {}
        for gateway in gateways:
            await gateway.stop()

    # ---- environment ----

    def build_env(
        self, task: Any, resources: NamedResources, rollout: Rollout, endpoint: str, secret: str
    ) -> dict[str, str]:
        """The environment of the process running `rollout`."""
        from agentlightning.gateway import attempt_key, rollout_urls

        attempt_id = getattr(getattr(rollout, "attempt", None), "attempt_id", None)
        if not attempt_id:
            raise ValueError(f"rollout {rollout.rollout_id!r} has no attempt; ProcessAgent runs attempted rollouts")
        mode = "train" if rollout.mode == "train" else "val"
        base_url, event_url = rollout_urls(endpoint, rollout.rollout_id, attempt_id, mode)
        env = dict(os.environ)
        env.update(self.env)
        env.update(
            {
                "AGL_OPENAI_BASE_URL": base_url,
                "AGL_EVENT_URL": event_url,
                "AGL_KEY": attempt_key(secret, rollout.rollout_id, attempt_id),
                "AGL_ROLLOUT_ID": rollout.rollout_id,
                "AGL_ATTEMPT_ID": attempt_id,
                "AGL_MODE": mode,
                "AGL_TASK": _env_value(task),
            }
        )
        model = next((r.model for r in resources.values() if isinstance(r, LLM)), None)
        if model:
            env["AGL_MODEL"] = model
        if self.env_map:
            if not isinstance(task, Mapping):
                raise TypeError(
                    f"env_map {sorted(self.env_map)} reads task fields, but the task of rollout "
                    f"{rollout.rollout_id!r} is a {type(task).__name__}, not a dict"
                )
            for name, field in self.env_map.items():
                if field not in task:
                    raise ValueError(
                        f"env_map[{name!r}] reads task field {field!r}, which the task of rollout "
                        f"{rollout.rollout_id!r} lacks (fields: {sorted(map(str, task))})"  # type: ignore[arg-type]
                    )
                env[name] = _env_value(task[field])
        return env

    # ---- one rollout ----

    async def rollout_async(self, task: Any, resources: NamedResources, rollout: Rollout) -> None:
        endpoint, secret = await self._gateway_endpoint()
        env = self.build_env(task, resources, rollout, endpoint, secret)
        timeout = self.timeout_seconds or rollout.config.timeout_seconds
        started = time.time()
        closes = self._closes
        process = await asyncio.create_subprocess_exec(
            *self.argv,
            env=env,
            cwd=self.cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own session, hence its own process group (pgid == pid)
        )
        _live_groups.add(process.pid)
        self._running_groups.add(process.pid)
        if self._closes != closes:  # close() ran while the process was being started: it did not see it
            _kill_group(process.pid, signal.SIGKILL)
        tail: collections.deque[str] = collections.deque()
        reader = asyncio.ensure_future(self._read_stderr(process, tail))
        reason, exit_code = "exit", None
        try:
            try:
                exit_code = await asyncio.wait_for(process.wait(), timeout)
            except asyncio.TimeoutError:
                reason = "timeout"
                exit_code = await self._terminate(process)
            except asyncio.CancelledError:
                reason = "cancelled"
                await asyncio.shield(self._terminate(process))
                raise
        finally:
            _kill_group(process.pid, signal.SIGKILL)  # whatever the leader left behind in its group
            _live_groups.discard(process.pid)
            self._running_groups.discard(process.pid)
            try:
                await asyncio.wait_for(reader, 5.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                reader.cancel()
            stderr_tail = "".join(tail)[-self.stderr_tail_chars :]
            report: dict[str, Any] = {
                "command": self.argv,
                "pid": process.pid,
                "exit_code": exit_code,
                "reason": reason,
                "duration_seconds": round(time.time() - started, 3),
            }
            if reason != "exit" or exit_code != 0:
                report["stderr_tail"] = stderr_tail
            await asyncio.shield(self._record(rollout, report))
        if reason == "timeout":
            raise ProcessAgentError(
                f"agent process {self.argv[0]!r} timed out after {timeout}s and was killed (status {exit_code}); "
                f"stderr tail:\n{stderr_tail}",
                exit_code=exit_code,
                reason=reason,
                stderr_tail=stderr_tail,
            )
        if exit_code != 0:
            raise ProcessAgentError(
                f"agent process {self.argv[0]!r} exited with status {exit_code}; stderr tail:\n{stderr_tail}",
                exit_code=exit_code,
                reason=reason,
                stderr_tail=stderr_tail,
            )
        return None

    async def _read_stderr(self, process: asyncio.subprocess.Process, tail: collections.deque[str]) -> None:
        assert process.stderr is not None
        size = 0
        while True:
            chunk = await process.stderr.read(4096)
            if not chunk:
                return
            text = chunk.decode("utf-8", "replace")
            if self.echo_stderr:
                sys.stderr.write(text)
            tail.append(text)
            size += len(text)
            while size - len(tail[0]) > self.stderr_tail_chars and len(tail) > 1:
                size -= len(tail.popleft())

    async def _terminate(self, process: asyncio.subprocess.Process) -> Optional[int]:
        """SIGTERM the process group, SIGKILL it after the grace period; returns the exit status."""
        _kill_group(process.pid, signal.SIGTERM)
        try:
            return await asyncio.wait_for(process.wait(), self.kill_grace_seconds)
        except asyncio.TimeoutError:
            _kill_group(process.pid, signal.SIGKILL)
            return await process.wait()

    async def _record(self, rollout: Rollout, report: dict[str, Any]) -> None:
        """Keep the process report in the attempt's metadata (best effort: never fails the rollout)."""
        attempt = getattr(rollout, "attempt", None)
        try:
            store = (
                self.gateway.store if self.gateway is not None and not isinstance(self.gateway, str) else self._store()
            )
            metadata = dict(getattr(attempt, "metadata", None) or {})
            metadata["process"] = report
            await store.update_attempt(rollout.rollout_id, attempt.attempt_id, metadata=metadata)  # type: ignore[union-attr]
        except Exception as exc:
            logger.warning("could not record the process report of rollout %s: %s", rollout.rollout_id, exc)
