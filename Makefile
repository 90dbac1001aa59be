# The two commands a new user needs: `make run` and `make test`.
# Both create .venv and install what is missing; nothing else is required.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

# The editable install is setuptools' strict mode: a tree of links to the sources under
# build/ and a plain path in a .pth, so no python of the venv imports an import hook at
# start-up (the default mode's finder took 11 ms of every launch; doc/performance.md,
# Start-up).  An edit shows at once through its link; a module added or removed needs a
# new link tree, so the install depends on the list of modules (build/.modules, rewritten
# only when that list changes), not on their contents.  The tree also maps the codec's
# proto/ to toolsrv/proto/ (setup.cfg, package_dir); the package data is found in the
# checkout itself (toolsrv/dirs/bundled.py), so a tool added to data/tools/ needs no new tree.
EDITABLE := --config-settings editable_mode=strict
# The extras `make` installs; `make test EXTRAS=test,mcp,lsp,otel` runs the suite without
# the search extra (search is then lexical, and the tests that need the model skip).  A
# venv made with other extras is rebuilt: the stamp records them.
EXTRAS ?= test,mcp,search,lsp,otel
MODULES := $(sort $(shell find toolsrv proto -name '*.py'))
MODLIST := build/.modules
EXTRAS_FILE := build/.extras

.PHONY: run test typecheck test-slow deploy-check image bench clean man FORCE
.DEFAULT_GOAL := $(STAMP)

$(MODLIST): FORCE
	@mkdir -p build
	@echo '$(MODULES)' | cmp -s - $@ || echo '$(MODULES)' > $@

$(EXTRAS_FILE): FORCE
	@mkdir -p build
	@echo '$(EXTRAS)' | cmp -s - $@ || echo '$(EXTRAS)' > $@

# the man pages, package data: made from their Markdown (doc/mdroff.py) before each install
MAN := toolsrv/man/toolsrv.1 toolsrv/man/toolsrv.4
man: $(MAN)
toolsrv/man/toolsrv.%: doc/toolsrv.%.md doc/mdroff.py
	$(PY) doc/mdroff.py $< > $@.tmp && mv $@.tmp $@

$(STAMP): setup.cfg pyproject.toml $(MODLIST) $(MAN) $(EXTRAS_FILE)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools
	$(if $(findstring search,$(EXTRAS)),,$(BIN)/python -m pip uninstall -q -y wordllama)
	$(BIN)/python -m pip install -q $(EDITABLE) -e '.[$(EXTRAS)]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/toolsrv serve $(ARGS)

# The type checker (mypy, setup.cfg's [mypy]: the package, zero errors), the whole suite,
# then the deployment check (the wheel installed in a fresh venv and run from elsewhere:
# tests/deploy/check.sh); a run of chosen tests (ARGS=...) skips the check.  mypy keeps its
# cache in build/mypy: a run after a small edit takes seconds.
test: typecheck
	$(BIN)/python -m pytest -q -m "not slow" $(ARGS)
	$(if $(ARGS),,bash tests/deploy/check.sh)

typecheck: $(STAMP)
	$(BIN)/mypy

deploy-check: $(STAMP)
	bash tests/deploy/check.sh

# The OCI image (deploy/image.sh): a Debian rootfs from mmdebstrap plus the wheel, imported
# into podman as localhost/toolsrv:KEY; rebuilt only when the wheel changes.  Its test,
# tests/deploy/test_image.py, is slow (make test-slow); doc/hosts.md, Running a fleet.
image: $(STAMP)
	bash deploy/image.sh

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow $(ARGS)

bench: $(STAMP)
	$(BIN)/python -m pip install -q $(EDITABLE) -e '.[bench]'
	$(BIN)/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis
