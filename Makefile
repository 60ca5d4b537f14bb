# Everything a fresh machine needs: `make demo` runs remem's main job, `make test` runs the checks CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CODE := $(wildcard src tests bench examples)

.PHONY: demo test lint install browser screenshots clean

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

# tests/test_server_ui.py drives the web inspector in Debian's chromium (no browser build is downloaded):
# installed here when it is missing (as root, or with sudo), so those tests run in CI and never skip there.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
		if ! command -v apt-get >/dev/null 2>&1; then \
			echo "chromium is missing and there is no apt-get: install chromium (or set REMEM_CHROMIUM) for the browser tests"; \
			exit 0; \
		fi; \
		echo "installing Debian's chromium for the web inspector's browser tests"; \
		SUDO=$$(test "$$(id -u)" -eq 0 || echo sudo); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; \
	}

test: lint browser
	$(BIN)/pytest -n 2 --dist loadgroup -q

# The README's pictures of the web inspector, taken by its browser tests.
screenshots: $(STAMP) browser
	REMEM_UI_SCREENSHOTS=docs/ui $(BIN)/pytest -n 0 -q tests/test_server_ui.py

clean:
	rm -rf $(VENV) .remem
