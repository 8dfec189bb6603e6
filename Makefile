PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_PIN ?= torch==2.13.0

# --no-compile: pip byte-compiles every module of every wheel (torch, ray, transformers: tens of
# thousands of files); a fresh `install-test` took 346 s with it and 96 s without (2026-12-02, 2
# cores, load 9-14). Python compiles what a run imports, on first import.
PIP_FAST := --no-compile

.PHONY: venv install install-train test demo bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

venv: $(BIN)/python

install: venv
	$(BIN)/pip install -q $(PIP_FAST) -e .

# torch first, pinned, so the `train` extra never pulls a CUDA build; `ray`: tests/engines/ (~35 s on 2 cores);
# skyrl: tests/online/ compares against its bin_packing.py (standard library only, so --no-deps)
install-test: venv
	$(BIN)/pip install -q $(PIP_FAST) $(TORCH_PIN)
	$(BIN)/pip install -q $(PIP_FAST) -e '.[test,train,ray]'
	$(BIN)/pip install -q $(PIP_FAST) --no-deps skyrl==0.3.0

# Bytecode on for the run: with PYTHONDONTWRITEBYTECODE set in the environment, every process
# the suite starts (the xdist workers, CLI subprocesses, spawned gloo ranks, Ray and DataLoader
# workers, Inductor's compile pool) compiled torch, ray and the rest from source again, as
# --no-compile left them; with it off, the first import writes the .pyc the others load.
# -n 3 on 2 cores: the suite waits on child processes, Ray's start and signals' timers about a
# third of its time (stop 49: 38 CPU-min in 31 min of -n 2 wall); a third worker fills it
# (stop 50's rehearsal: 25.2 min for 14,930 tests under helpers' load, where -n 2 took 30.8 for 14,454)
test: install-test
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n 3 --dist loadgroup --durations=15 tests

demo: install
	bash fixtures/demo.sh $(BIN)

clean:
	rm -rf $(VENV) demo_out
