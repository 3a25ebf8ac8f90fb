"""vLLM integration tests. The plugin's pure parts (records, sender) run in Batchscope's venv
from integrations/vllm; tests that need vLLM itself run it from .venv-vllm (`make vllm-install`)
and skip, saying so, when it is missing."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = ROOT / "integrations" / "vllm"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
sys.path.insert(0, str(PLUGIN_DIR))


@pytest.fixture
def validate():
    """Batchscope's own record validator, once it knows schema v2 (engine/telemetry.py)."""
    from engine import telemetry

    if getattr(telemetry, "SCHEMA_VERSION", 1) < 2:
        pytest.skip("engine/telemetry.py is schema v1 here; the v2 validator comes with core's "
                    "schema v2 (CONTRACTS.md)")
    return telemetry.validate_record


def require_vllm() -> Path:
    if not VLLM_PYTHON.exists():
        pytest.skip(f"{VLLM_PYTHON.relative_to(ROOT)} is missing: run `make vllm-install` "
                    "for the tests against a real vLLM")
    return VLLM_PYTHON
