"""lightning_cli: command lines from constructor signatures."""

from __future__ import annotations

from typing import Literal, Optional

import pytest

from agentlightning.config import lightning_cli


class TrainConfig:
    def __init__(
        self,
        lr: float = 0.1,
        epochs: int = 2,
        name: str = "run",
        verbose: bool = False,
        tags: Optional[list[str]] = None,
        mode: Literal["fast", "slow"] = "fast",
    ) -> None:
        self.lr, self.epochs, self.name, self.verbose, self.tags, self.mode = lr, epochs, name, verbose, tags, mode


class DataConfig:
    def __init__(self, path: str, limit: Optional[int] = None) -> None:
        self.path, self.limit = path, limit


def test_single_class_defaults_and_overrides() -> None:
    config = lightning_cli(TrainConfig, args=["--trainconfig.lr", "0.5", "--trainconfig.verbose"])
    assert isinstance(config, TrainConfig)
    assert (config.lr, config.epochs, config.verbose, config.mode) == (0.5, 2, True, "fast")


def test_several_classes_return_a_tuple() -> None:
    train, data = lightning_cli(
        TrainConfig,
        DataConfig,
        args=["--dataconfig.path", "x.jsonl", "--dataconfig.limit", "3", "--trainconfig.tags", "a", "b"],
    )
    assert data.path == "x.jsonl" and data.limit == 3
    assert train.tags == ["a", "b"]


def test_required_parameter_and_bad_choice_exit() -> None:
    with pytest.raises(SystemExit):
        lightning_cli(DataConfig, args=[])
    with pytest.raises(SystemExit):
        lightning_cli(TrainConfig, args=["--trainconfig.mode", "medium"])


def test_needs_a_class() -> None:
    with pytest.raises(ValueError, match="at least one config class"):
        lightning_cli()
