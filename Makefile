# The README's commands. Each one sets up (or reuses) the project virtualenv first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.minicb-installed

.PHONY: lab test demo soak notebooks

# Re-installs only when the dependency list or the pins change, so a second run takes seconds.
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "minicb needs Python >= 3.10, found " + sys.version.split()[0]'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

lab: $(STAMP)
	mkdir -p notebooks
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

# The tests grade the reference solutions (MINICB_IMPL=solutions); tests/test_course.py also runs the
# exercise tests against the stubs, where each must fail with its own task's message. nbval runs every
# lesson and compares the outputs it checks with the ones stored in the notebook.
test: $(STAMP)
	MINICB_IMPL=solutions $(PY) -m pytest tests notebooks --nbval --nbval-current-env

# Re-run every lesson and store its fresh outputs (after changing a lesson or the engine).
notebooks: $(STAMP)
	MINICB_IMPL=solutions $(PY) tools/check_notebooks.py --write

demo: $(STAMP)
	$(PY) -m minicb demo --max-tokens 120

# The deep reliability run: 10,500 random schedules (10,000 simulated, 500 on the real Bard model).
soak: $(STAMP)
	$(PY) -m pytest tests/test_reliability.py --hypothesis-profile=soak -q
