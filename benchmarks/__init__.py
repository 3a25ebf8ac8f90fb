"""Batchscope benchmarks: the engine side by side with transformers on seeded workloads.

``python -m benchmarks --setting small`` (see ``__main__``). Each peer runs in its own
subprocess (``worker``) so that its peak memory and warm-up are its own.
"""
