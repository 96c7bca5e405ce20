# agentkit — every target installs what it needs first (an install is a no-op when nothing
# changed: its stamp file is newer than pyproject.toml).
#
# Two sets: `make lab` installs what a learner needs to run the notebooks (the `notebooks`
# extra; `make frameworks` adds notebook 08's agent frameworks); `make install` (and every
# developer target: test, lint, typecheck, notebooks, ...) installs the `dev` extra, which holds
# both and the developer tools.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
STAMP  := $(VENV)/.installed
LAB_STAMP        := $(VENV)/.installed-lab
FRAMEWORKS_STAMP := $(VENV)/.installed-frameworks
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg

## A room without network: `make wheelhouse` on a connected machine (same OS and Python as the
## room's) fills WHEELS with every wheel `make lab` and `make frameworks` need; copied with the
## repository, it makes the learners' installs (pip itself, `make lab`, `make frameworks`) read
## that folder only, never the network. The developer's install (`make install`) ignores it.
WHEELS  ?= wheels
OFFLINE  = $(if $(wildcard $(WHEELS)/*.whl),--no-index --find-links $(WHEELS))

.PHONY: install lab lab-install frameworks wheelhouse test test-unit test-postgres test-notebooks test-browser test-interop test-offline lint typecheck docs notebooks bench clean handout

install: $(STAMP)

## pip's editable install of agentkit is an import hook (the agentkit.data -> data/ mapping
## rules out a plain path), which type checkers cannot run: outside this folder mypy and
## pyright would not find agentkit. A static path entry to a folder holding only a link to
## agentkit/ lets them find it (py.typed included); agentkit.data still comes from the hook.
STATIC := $(VENV)/static-path

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade $(OFFLINE) pip

define static_path
	mkdir -p $(STATIC)
	ln -sfn "$(CURDIR)/agentkit" $(STATIC)/agentkit
	$(BIN)/python -c 'import pathlib, sys, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"], "agentkit-static-path.pth").write_text(sys.argv[1] + "\n")' "$(abspath $(STATIC))"
endef

define lab_settings
	mkdir -p $(VENV)/share/jupyter/lab/settings
	cp jupyter-config/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
endef

# The developer's install: the dev extra holds the notebooks' and the frameworks' extras too.
# It always reads the index: a wheelhouse (WHEELS) holds the learners' packages only, not the
# developer tools, so `make install`, `make test` … never look there.
$(STAMP): pyproject.toml jupyter-config/overrides.json Makefile | $(BIN)/python
	$(PIP) install --quiet -e '.[dev]'
	$(static_path)
	$(lab_settings)
	touch $(STAMP) $(LAB_STAMP) $(FRAMEWORKS_STAMP)

# The learner's install: only what the notebooks import, no developer tool.
$(LAB_STAMP): pyproject.toml jupyter-config/overrides.json | $(BIN)/python
	$(PIP) install --quiet $(OFFLINE) -e '.[notebooks]'
	$(static_path)
	$(lab_settings)
	touch $(LAB_STAMP)

# Notebook 08's agent frameworks (openai-agents, Pydantic AI, LangGraph), on top of the lab.
$(FRAMEWORKS_STAMP): pyproject.toml | $(LAB_STAMP)
	$(PIP) install --quiet $(OFFLINE) -e '.[notebooks,frameworks]'
	$(static_path)
	touch $(FRAMEWORKS_STAMP)

lab-install: $(LAB_STAMP)

frameworks: $(FRAMEWORKS_STAMP)

## Fill WHEELS on a connected machine (pip itself, the build backend, and the notebooks' and
## the frameworks' packages, built as wheels), for a room without network (see WHEELS above).
wheelhouse: | $(BIN)/python
	$(PIP) wheel --quiet --wheel-dir $(WHEELS) pip 'setuptools>=77' '.[notebooks,frameworks]'

## Open JupyterLab on the notebooks: the kit's main job (installs the notebooks' packages only). Jupyter refuses to run as root
## unless told (containers, CI, cloud notebooks), so --allow-root is added only for root.
## Extra flags: make lab JUPYTER_ARGS="--port=8890 --no-browser"
JUPYTER_ARGS ?=
LAB_ROOT_ARGS = $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)
lab: $(LAB_STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks $(LAB_ROOT_ARGS) $(JUPYTER_ARGS)

## Unit tests, then strict nbval over every stored notebook, on every core: one file per
## worker (`--dist loadfile`), so each notebook runs top to bottom in one kernel. Three
## workers for every two cores: a worker spends about a third of its time waiting (on its
## child processes, a kernel, PostgreSQL's flushes), and on 2 cores 3 workers took 138 s
## where 2 took 174 s, for the same CPU. WORKERS=0 runs everything in this process.
## Bytecode is kept (__pycache__, ignored by git) even where the environment turns it off
## (PYTHONDONTWRITEBYTECODE, common in containers): otherwise every worker, kernel and child
## process compiles the kit and pytest rewrites every test module again, ~10 s of CPU per
## worker. The browser suite is not even collected here (it has its own target): its driver
## imports Playwright, ~0.25 s of CPU in every worker. tests/_lean_pytest.py, loaded first,
## spares each pytest process an import at its start (~1.6 s of CPU) and each worker the
## interpreter's teardown at its end (1-8 s before the run could end); see its docstring.
WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n * 3 / 2 > 1 ? n * 3 / 2 : 1 )))
test: install
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -p tests._lean_pytest tests notebooks --ignore=tests/browser -m "not browser and not interop and not offline" $(NBVAL) -n $(WORKERS) --dist loadfile

test-unit: install
	$(BIN)/python -m pytest tests -m "not browser and not interop and not offline"

## The store suites against a real PostgreSQL server: a throwaway cluster on 127.0.0.1
## (tools/pg_cluster.sh; installs Debian's postgresql when missing), stopped afterwards.
## CI=true makes an unreachable server a failure instead of a skip.
test-postgres: install
	@pg_env="$$(tools/pg_cluster.sh start)" && trap 'tools/pg_cluster.sh stop' EXIT && \
	eval "$$pg_env" && \
	CI=true $(BIN)/python -m pytest tests/policy/test_stores.py tests/policy/test_store_runner.py \
	    tests/policy/test_store_migration.py tests/policy/test_store_operations.py \
	    tests/policy/test_store_outage_log.py tests/faces/test_keys_cli.py \
	    tests/policy/test_store_event_loops.py tests/policy/test_caller_goes_away.py \
	    tests/faces/test_face_langgraph_restarts.py tests/test_examples.py -p no:cacheprovider

## The MCP server through another implementation: the MCP Inspector's CLI (npx, from npm;
## needs Debian's nodejs and npm, which .ci/run installs). Skips without npx, except under CI.
test-interop: install
	$(BIN)/python -m pytest tests -m interop -p no:cacheprovider

## The offline room: build a wheelhouse (network), then `make lab` in a copy of the repository
## with pip's network blocked; checks the learners' venv (no developer tool). A few minutes.
test-offline: install
	$(BIN)/python -m pytest tests -m offline -p no:cacheprovider

test-notebooks: install
	$(BIN)/python -m pytest -p tests._lean_pytest notebooks $(NBVAL)

## Drive JupyterLab in headless Chromium (needs Debian's `chromium`; .ci/run installs it).
test-browser: install
	$(BIN)/python -m pytest tests/browser -m browser -p no:cacheprovider

## ruff over the package, the tests, the tools, the benchmarks and the examples ([tool.ruff] in pyproject).
lint: install
	$(BIN)/ruff check agentkit tests tools benchmarks examples

## mypy --strict over the package, the typing test of the public API and the practitioner's
## example, which a user copies as it is ([tool.mypy]).
typecheck: install
	$(BIN)/mypy --strict agentkit tests/typing examples/practitioner

## The documentation site (mkdocs.yml: MkDocs, Material, mkdocstrings) into build/site, strict:
## a broken link, anchor or API reference fails. Offline: no web font, nothing from a CDN at
## build time (open build/site/index.html from disk). The `docs` extra (in dev) brings the tools.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

## Re-execute every notebook in order and store its outputs (run before committing).
notebooks: install
	$(BIN)/python tools/run_notebooks.py notebooks

## The class handout (one printable A4 page) and the instructor's answer key, as HTML in
## build/, generated from the kit's own codes, levels, matrix and notebooks (print from a browser).
handout: $(LAB_STAMP)
	$(BIN)/python tools/handout.py --out build

## The boundary beside its floors and peers (installs the bench extra itself; ~2 min, plus
## strict nbval and `make test` unless BENCH_ARGS=--skip-slow). Never part of `make test`.
bench: install
	$(BIN)/python benchmarks/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
