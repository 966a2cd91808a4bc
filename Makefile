# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test docs bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,plot,docs,dask,fast]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m dptensor demo

test: $(STAMP)
	$(PY) -m pytest -q

docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) -m dptensor bench

clean:
	rm -rf $(VENV) build docs/_build *.egg-info
