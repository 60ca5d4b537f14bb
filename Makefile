# Everything a fresh machine needs: `make demo` runs remem's main job, `make test` runs the checks CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CODE := $(wildcard src tests bench examples)

.PHONY: demo test lint install clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip==26.3"
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/remem demo

lint: $(STAMP)
	$(BIN)/ruff check $(CODE)
	$(BIN)/ruff format --check $(CODE)
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -n 2 --dist loadgroup -q

clean:
	rm -rf $(VENV) .remem
