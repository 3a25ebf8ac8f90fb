import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory):
    """family -> directory of a tiny random model (built once per session)."""
    from tiny_models import FAMILIES, build_tiny_model

    root = tmp_path_factory.mktemp("tiny_models")
    return {family: build_tiny_model(family, root / family) for family in FAMILIES}


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model_dirs):
    """The tiny model most tests use (SmolLM2 shapes, GQA, tied embeddings)."""
    return str(tiny_model_dirs["smollm2"])
