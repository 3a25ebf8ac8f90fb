"""The skip mark of the tests that need the CPU kernels, with the reason they are off here (no C
compiler, a failed build, or a CPU without AVX-512: cpu_kernels.here)."""
import pytest

from engine import cpu_kernels

needs_kernels = pytest.mark.skipif(cpu_kernels.load() is None,
                                   reason=f"the CPU kernels are off here: {cpu_kernels.why_off()}")
