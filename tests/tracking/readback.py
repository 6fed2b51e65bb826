"""Read back what a tracking backend wrote, with the backend's own library (no agentlightning code)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def wandb_run(directory: Path) -> dict[str, Any]:
    """`{"name", "project", "config", "history": {metric: {step: value}}}` of the single offline W&B run."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    files = sorted(directory.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    store = datastore.DataStore()
    store.open_for_scan(str(files[0]))
    run: dict[str, Any] = {"config": {}, "history": {}}
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run["name"], run["project"] = record.run.display_name, record.run.project
        elif kind == "config":
            run["config"].update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "history":
            for item in record.history.item:
                key = item.key or ".".join(item.nested_key)  # newer clients fill nested_key only
                if not key.startswith("_"):
                    run["history"].setdefault(key, {})[record.history.step.num] = json.loads(item.value_json)
    return run


def mlflow_run(directory: Path, experiment: str = "agentlightning") -> dict[str, Any]:
    """`{"name", "status", "params", "history": {metric: {step: value}}}` of the single MLflow run."""
    import os

    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3.7+ asks for it to read a file store

    client = MlflowClient(tracking_uri=(directory / "mlruns").resolve().as_uri())
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no MLflow experiment {experiment!r}"
    runs = client.search_runs([found.experiment_id])
    assert len(runs) == 1, runs
    run = runs[0]
    history = {
        key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)} for key in run.data.metrics
    }
    return {"name": run.info.run_name, "status": run.info.status, "params": run.data.params, "history": history}


def tensorboard_run(log_dir: Path) -> dict[str, Any]:
    """`{"config": str, "history": {tag: {step: value}}}` read with TensorBoard's EventAccumulator."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    history = {tag: {e.step: e.value for e in accumulator.Scalars(tag)} for tag in tags["scalars"]}
    config = ""
    if "config/text_summary" in tags["tensors"] or "config" in tags["tensors"]:
        tag = "config" if "config" in tags["tensors"] else "config/text_summary"
        config = accumulator.Tensors(tag)[0].tensor_proto.string_val[0].decode()
    return {"config": config, "history": history, "tensor_tags": tags["tensors"]}
