"""Fixtures that run every store test once per registered backend (see `tests/store/backends.py`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentlightning.store import LightningStore

from .backends import BACKENDS, Backend, FakeClock


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "backend_traits(*traits): run only on store backends that declare all these traits"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    required: set[str] = set()
    for marker in metafunc.definition.iter_markers("backend_traits"):
        required.update(marker.args)
    params = [
        pytest.param(backend, id=backend.name, marks=backend.marks)
        for backend in BACKENDS.values()
        if required <= backend.traits
    ]
    metafunc.parametrize("backend", params, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(backend: Backend, tmp_path: Path, clock: FakeClock) -> AsyncIterator[LightningStore]:
    async with backend.factory(tmp_path, clock) as created:
        yield created
