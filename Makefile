# make demo: set up .venv and run the main job on the built-in default.
# make test: set up .venv and run the test suite.
# make check: the fast pure tier (no processes, namespaces or browser).
# make fit: write the packaged fit again (after a change to the fit's code or reference table).
# make docs: build the documentation site into site/ (strict); make docs SERVE=1 serves it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.scalelab-installed

.PHONY: demo test check lint fit bench clean docs docs-serve

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(BIN)/pip install --quiet -e '.[dev,docs]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/scalelab advise resnet18 --input-shape 3,64,64 --num-classes 100 --max-batch 64 --out scalelab-out

# two pytest workers (pytest-xdist): the suite averages about one busy core, and its
# multi-process tests spend much of their time waiting on each other
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2

# the pure tier for the edit loop: no processes, namespaces, browser or slow runs
check: $(STAMP)
	$(BIN)/python -m pytest -q -m "not dist and not netem and not browser and not slow"

fit: $(STAMP)
	$(BIN)/python -m scalelab.hardware.packaged --write

# the site: strict, so a broken link, reference or page fails; SERVE=1 (or docs-serve)
# serves it on 127.0.0.1:8000 and rebuilds on change
docs: $(STAMP)
ifdef SERVE
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict -a 127.0.0.1:8000
else
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
endif

docs-serve:
	$(MAKE) docs SERVE=1

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) build site *.egg-info src/*.egg-info
