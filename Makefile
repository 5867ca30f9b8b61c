# envctl: the two commands of the README are `make demo` and `make test`.
VENV   ?= .venv
PYTHON ?= python3
ENVCTL := $(VENV)/bin/envctl
PYTEST_ARGS ?=

.PHONY: all venv system engine images demo test test-pytest test-fast rehearse bench clean

all: test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test,cloud,browser]'
	touch $@

venv: $(VENV)/.installed

system:
	bash scripts/system-deps.sh

engine: system
	bash scripts/docker-engine.sh

images: venv engine
	$(ENVCTL) images build --flavor mini

# Build the mini images, bring every site up, print the URLs, run the smoke suite.
demo: images
	$(ENVCTL) up --all --flavor mini
	$(ENVCTL) env
	$(ENVCTL) smoke --tasks mini

# Everything, with real containers and a real browser, and the full-flavor rehearsal (what CI runs):
# three lanes side by side, then the tests that restart the engine (scripts/test.sh; lanes: tests/conftest.py).
test: images
	VENV=$(VENV) PYTEST_ARGS="$(PYTEST_ARGS)" bash scripts/test.sh

# The whole pytest suite in one session (no lanes, no rehearsal).
test-pytest: venv engine
	$(VENV)/bin/pytest $(PYTEST_ARGS)

# The full flavor end to end (images get -> load/pull -> extract -> up -> login -> write -> reset ->
# snapshot -> down, every site) from a local mirror and registry of replicas of the upstream artifacts;
# then the slim flavor the same way, from replicas of webarena-verified's images (scripts/slim-replica/).
rehearse: venv engine
	$(VENV)/bin/python scripts/rehearse.py
	$(VENV)/bin/python scripts/rehearse.py --flavor slim

# The unit layer only (no Docker, no browser).
test-fast: venv
	$(VENV)/bin/pytest -m "not docker and not browser" $(PYTEST_ARGS)

bench: images
	$(VENV)/bin/python bench/up.py
	$(VENV)/bin/python bench/reset.py
	$(VENV)/bin/python bench/reset.py --mode tight
	$(VENV)/bin/python bench/login.py
	$(VENV)/bin/python bench/fetch.py
	$(VENV)/bin/python bench/snapshot.py
	$(VENV)/bin/python bench/proxy_flip.py
	$(VENV)/bin/python bench/full_reset.py
	$(VENV)/bin/python bench/leases.py
	$(VENV)/bin/python bench/turnaround.py
	$(VENV)/bin/python bench/study.py
	$(VENV)/bin/python bench/density.py
	$(VENV)/bin/python bench/swarm.py
	$(VENV)/bin/python bench/inplace.py
	$(VENV)/bin/python bench/signals.py

clean:
	-$(ENVCTL) down --instance default
	rm -rf $(VENV) .pytest_cache reports
