"""Agent mode end to end on CPU with the real verl package: a v0.3-style config, a v1.0-contract agent run by
`ProcessAgent` against an upstream that (like verl's vLLM replicas) serves only its own model name, the
batch verl trains on with our RL defaults, bounded-staleness async, and `python -m agentlightning.verl`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import agentlightning as agl
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import LLM
from agentlightning.verl.config import daemon_options, merge_config
from agentlightning.verl.daemon import AgentModeDaemon
from tests.support.openai_server import OpenAITestServer

torch = pytest.importorskip("torch", reason="the verl batch tensors need torch (train extra)")
pytest.importorskip("verl.trainer.ppo.core_algos", reason="needs verl (installed --no-deps) + codetiming")
from omegaconf import OmegaConf  # noqa: E402

from agentlightning.verl.objectives import per_rollout_loss_weights, rollout_level_advantages  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).with_name("configs") / "tool_agent_grpo.yaml"
AGENT = f"{ROOT / 'tests' / 'support' / 'v1_contract_agent.py'}:V1ContractAgent"
SERVED = "Qwen/Qwen2.5-1.5B-Instruct"


def drive(agent: Any, scenario: Callable[[AgentModeDaemon, OpenAITestServer], None], **options: Any) -> None:
    """Run `scenario(daemon, upstream)` as the algorithm of a Trainer whose runner threads run `agent`."""
    store = InMemoryLightningStore(thread_safe=True, scan_debounce_seconds=0.2)
    with OpenAITestServer(model=SERVED, strict_model=True, always_return_token_ids=True) as upstream:

        @agl.algo
        def algorithm(*, store: agl.LightningStore) -> None:
            daemon = AgentModeDaemon(store=store, pad_token_id=0, poll_interval=0.1, **options)
            daemon.start()
            try:
                scenario(daemon, upstream)
            finally:
                daemon.stop()

        trainer = agl.Trainer(
            algorithm=algorithm,
            store=store,
            tracer=agl.OtelTracer(),
            runner={"poll_interval": 0.05, "heartbeat_interval": 0.5},
            strategy={"type": "shm", "n_runners": 2, "main_thread": "algorithm", "graceful_delay": 2.0},
        )
        trainer.fit(agent)


def address(upstream: OpenAITestServer) -> str:
    return upstream.base_url.removeprefix("http://").removesuffix("/v1")


def test_v0_3_config_and_a_v1_agent_sending_auto_build_the_batch_verl_trains_on() -> None:
    config = merge_config(OmegaConf.load(CONFIG))
    options = {**daemon_options(config), "port": None}
    assert options["trace_aggregation"] == "trajectory" and options["train_information"]["model"] == SERVED
    result: dict[str, Any] = {}

    def scenario(daemon: AgentModeDaemon, upstream: OpenAITestServer) -> None:
        tasks = {
            "question": np.array(["say 42", "say 7"], dtype=object),
            "answer": np.array(["42", "99"], dtype=object),
        }
        daemon.set_up_data_and_server(tasks, [address(upstream)])
        daemon.run_until_all_finished()
        result["proto"], result["metrics"] = daemon.get_train_data_batch(64, 32, device="cpu")
        result["served"] = list(upstream.responses)
        result["rejected"] = list(upstream.rejected_models)
        result["models"] = [request["model"] for request in upstream.requests]

    agent = agl.ProcessAgent(agent_class=AGENT, env_map={"QUESTION": "question", "ANSWER": "answer"})
    drive(agent, scenario, **options)
    assert result["rejected"] == [] and set(result["models"]) == {SERVED}, "'auto' never reached the upstream"
    metrics, proto = result["metrics"], result["proto"]
    assert metrics["training/n_rollouts"] == 4 and metrics["training/n_rollouts_failed"] == 0
    assert metrics["training/reward"] == pytest.approx(0.5), "'say 42' earns 1, 'say 7' (answer 99) earns 0"
    assert len(proto) == 4
    served = {tuple(r["prompt_token_ids"]): r["choices"][0]["token_ids"] for r in result["served"]}
    for row in range(len(proto)):
        prompt_len = int(proto.batch["attention_mask"][row, :64].sum())
        prompt = tuple(proto.batch["prompts"][row, 64 - prompt_len :].tolist())
        response = proto.batch["responses"][row, : len(served[prompt])].tolist()
        assert response == served[prompt], "the batch holds exactly the token ids the upstream generated"

    # What the trainer does next, with verl's own estimator: one advantage per rollout, equal rollout weights.
    proto.non_tensor_batch["uid"] = proto.non_tensor_batch["data_id_list"]
    scores = proto.batch["token_level_scores"]
    advantages, _ = rollout_level_advantages(
        scores, proto.batch["response_mask"], proto.non_tensor_batch["rollout_id_list"], proto.non_tensor_batch["uid"]
    )
    rewards = scores.sum(dim=-1)
    for row in range(len(proto)):
        trained = proto.batch["response_mask"][row].bool()
        sign = 0.0 if rewards[row] == 0.5 else float(torch.sign(advantages[row][trained][0]))
        assert sign == (0.0 if rewards[row] == 0.5 else (1.0 if rewards[row] > 0 else -1.0)) or torch.all(
            advantages[row][trained] == 0
        )
    weights = per_rollout_loss_weights(proto.batch["response_mask"], proto.non_tensor_batch["rollout_id_list"])
    assert torch.all(weights[proto.batch["response_mask"] == 0] == 0) and float(weights.sum()) > 0


@agl.rollout
async def paced_agent(task: dict[str, Any], llm: LLM) -> float:
    """One call; `slow` tasks first wait, so their group finishes after the step that enqueued it trains."""
    from openai import AsyncOpenAI

    if task["pace"] == "slow":
        await asyncio.sleep(float(task["delay"]))
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
    await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["question"]}])
    return float(task["reward"])


def _paced(paces: list[str], delay: float, tag: str) -> dict[str, Any]:
    return {
        "question": np.array([f"{tag} question {i}" for i in range(len(paces))], dtype=object),
        "pace": np.array(paces, dtype=object),
        "delay": np.array([delay] * len(paces)),
        "reward": np.array([1.0] * len(paces)),
    }


@pytest.mark.parametrize("max_staleness, trained_late", [(1, True), (0, False)])
def test_async_steps_train_complete_groups_and_carry_or_drop_the_slow_ones(
    max_staleness: int, trained_late: bool
) -> None:
    steps: list[dict[str, Any]] = []

    def scenario(daemon: AgentModeDaemon, upstream: OpenAITestServer) -> None:
        daemon.set_up_data_and_server(_paced(["fast", "slow"], 1.0, "first"), [address(upstream)])
        daemon.run_until_all_finished()  # async: as many complete groups as enqueued would do, oldest first
        steps.append(daemon.get_train_token_batch(64, 16)[1])
        daemon.clear_data_and_server()  # keeps the slow group running
        daemon.on_weights_updated()
        daemon.set_up_data_and_server(_paced(["slow"], 1.5, "second"), [address(upstream)])
        daemon.run_until_all_finished()
        steps.append(daemon.get_train_token_batch(64, 16)[1])

    # data.train_batch_size=1 (train_groups), async_train_batch_size=2 (max_in_flight)
    drive(paced_agent, scenario, train_rollout_n=2, train_information={"model": SERVED}, async_rollout=True,
          max_staleness=max_staleness, max_in_flight=2, train_groups=1)  # fmt: skip
    first, second = steps
    assert first["training/async_groups_trained"] == 1 and first["training/n_rollouts"] == 2
    assert first["training/async_groups_carried_over"] == 1 and first["training/async_max_staleness"] == 0
    if trained_late:
        # The first step's slow group (1 s) finishes before the second step's (1.5 s, enqueued later): it is
        # the oldest complete group, trained one update old; the new group is carried over.
        assert second["training/async_groups_trained"] == 1 and second["training/async_max_staleness"] == 1
        assert second["training/async_groups_carried_over"] == 1 and second["training/async_groups_dropped_stale"] == 0
    else:
        # One update old is too old: that group is dropped and the step waits for its own group.
        assert second["training/async_groups_dropped_stale"] == 1 and second["training/async_max_staleness"] == 0
        assert second["training/async_groups_trained"] == 1 and second["training/n_rollouts"] == 2


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as parquet

    parquet.write_table(pa.Table.from_pylist(rows), path)


def test_python_m_agentlightning_verl_dry_run_reads_parquet_and_checks_the_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentlightning.verl.launch import main

    train, val = tmp_path / "train.parquet", tmp_path / "test.parquet"
    _write_parquet(train, [{"question": f"say {i}", "answer": str(i)} for i in range(6)])
    _write_parquet(val, [{"question": "say 1", "answer": "1"}])
    common = [
        f"data.train_files={train}",
        f"data.val_files=[{val}]",
        "data.train_batch_size=2",
        "trainer.total_epochs=1",
        f"agentlightning.local.agent_class={AGENT}",
        "agentlightning.local.env_map={QUESTION: input.question, ANSWER: answer}",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.enable_auto_tool_choice=true",
        "trainer.logger=[console,wandb]",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "agentlightning.verl", "--config", str(CONFIG), *common, "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    import json

    summary = json.loads(done.stdout)
    assert summary["train_tasks"] == 6 and summary["val_tasks"] == 1 and summary["steps_per_epoch"] == 3
    assert summary["rollouts_per_step"] == 4 and summary["served_model_name"] == SERVED
    assert (summary["trace_aggregation"], summary["advantage_level"], summary["loss_aggregation"]) == (
        "trajectory",
        "rollout",
        "per_rollout_mean",
    )
    # The same entry in-process: --cfg job, and the mistakes it reports (exit status 2, the reason on stderr).
    assert main(["--config", str(CONFIG), *common, "--cfg", "job"]) == 0
    assert "enable_auto_tool_choice: true" in capsys.readouterr().out
    assert main(["--config", str(CONFIG), *common, "actor_rollout_ref.rollout.multi_turn.formatt=x", "--dry-run"]) == 2
    assert "actor_rollout_ref.rollout.multi_turn.formatt" in capsys.readouterr().err
    assert main([*common, "actor_rollout_ref.model.path=m", "agentlightning.local.env_map={Q: nope}"]) == 2
    assert "'nope'" in capsys.readouterr().err
    assert main(["actor_rollout_ref.model.path=m", f"data.train_files={tmp_path / 'absent.parquet'}", "--dry-run"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["actor_rollout_ref.model.path=m", "--dry-run"]) == 2
    assert "data.train_files is not set" in capsys.readouterr().err


def test_v1_run_ppo_signature_trains_the_configured_agent_class() -> None:
    import inspect

    from agentlightning.verl.entrypoint import run_ppo

    assert list(inspect.signature(run_ppo).parameters)[:3] == ["config", "train_dataset", "val_dataset"]
    config = merge_config(OmegaConf.load(CONFIG))
    config.agentlightning.n_runners = 1
    with pytest.raises(ValueError, match="agentlightning.local.agent_class"):
        run_ppo(config, [{"question": "q", "answer": "a"}], None)
    try:
        import vllm  # noqa: F401  # type: ignore[import-not-found]
    except ImportError:
        # No GPU stack here: the v1.0-style call gets as far as VERL's start and says what is missing.
        config.agentlightning.local.agent_class = AGENT
        with pytest.raises(RuntimeError, match="vllm is not installed"):
            run_ppo(config, [{"question": "q", "answer": "a"}], None)
