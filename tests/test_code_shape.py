"""Code shape rules checked on every run: no function in engine/, viz/, serve/, the vLLM plugin or
benchmarks/ over 60 lines, and
LLMEngine.step short enough to read as schedule -> execute -> postprocess -> record."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 60


def functions(directory: str):
    for path in sorted((ROOT / directory).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{path.relative_to(ROOT)}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1


CHECKED = ("engine", "viz", "serve", "integrations/vllm/batchscope_vllm", "benchmarks")


def test_no_function_over_60_lines():
    long = [f"{where} ({n} lines)" for d in CHECKED for where, n in functions(d) if n > MAX_FUNCTION_LINES]
    assert long == []


def test_the_engine_step_stays_short():
    steps = [n for where, n in functions("engine") if where.startswith("engine/llm_engine.py")
             and where.endswith(" step")]
    assert steps and steps[0] <= 25
