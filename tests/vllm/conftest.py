"""vLLM integration tests. The plugin's pure parts (records, sender) run in Batchscope's venv
from integrations/vllm; tests that need vLLM itself run it from .venv-vllm (`make vllm-install`)
and skip, saying so, when it is missing."""
import sys

import pytest
from vllm_env import PLUGIN_DIR

sys.path.insert(0, str(PLUGIN_DIR))


@pytest.fixture
def validate():
    """Batchscope's own record validator (engine/telemetry.py)."""
    from engine import telemetry

    return telemetry.validate_record


@pytest.fixture(scope="module")
def fake():
    """A loopback stand-in for vLLM's OpenAI API (fake_openai.py); ``fake.url`` is its address."""
    from fake_openai import FakeOpenAI

    from support.server import BackgroundServer

    server = FakeOpenAI()
    with BackgroundServer(server.app()) as running:
        server.url = running.url
        yield server
