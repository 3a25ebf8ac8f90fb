"""The CPU kernels' build as CI must see it: a C source that does not compile is an error under
``BATCHSCOPE_REQUIRE_KERNELS=1`` (not a silent fallback to torch's ops that only makes CI slower),
and the sources build with the oldest GCC the project supports (GCC 11, Ubuntu 22.04's)."""
from __future__ import annotations

import shutil

import pytest

from engine import cpu_kernels


@pytest.fixture
def broken_sources(tmp_path, monkeypatch):
    sources = tmp_path / "csrc"
    shutil.copytree(cpu_kernels.SOURCES, sources)
    (sources / "elementwise.c").write_text((sources / "elementwise.c").read_text() + "\nthis is not C;\n")
    monkeypatch.setattr(cpu_kernels, "SOURCES", sources)
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(tmp_path / "cache"))
    return sources


def test_a_broken_kernel_source_fails_loudly_when_kernels_are_required(broken_sources, monkeypatch):
    monkeypatch.setenv(cpu_kernels.REQUIRE_KERNELS, "1")
    said = r"(?s)BATCHSCOPE_REQUIRE_KERNELS=1 and the CPU kernels did not build.*elementwise.c.*error"
    with pytest.raises(RuntimeError, match=said):
        cpu_kernels.built.__wrapped__()


def test_without_the_requirement_a_broken_source_falls_back_and_says_why(broken_sources, monkeypatch, caplog):
    monkeypatch.delenv(cpu_kernels.REQUIRE_KERNELS, raising=False)
    assert cpu_kernels.built.__wrapped__() is None
    assert "did not build" in caplog.text and "torch's ops are used instead" in caplog.text


@pytest.mark.skipif(shutil.which("gcc-11") is None, reason="gcc-11 is not installed (apt-get install gcc-11)")
def test_the_kernels_build_with_gcc_11(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "gcc-11")
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(tmp_path))
    monkeypatch.setenv(cpu_kernels.REQUIRE_KERNELS, "1")
    assert cpu_kernels.built.__wrapped__() is not None
