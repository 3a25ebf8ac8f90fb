"""The CPU kernels' build as CI must see it: a C source that does not compile is an error under
``BATCHSCOPE_REQUIRE_KERNELS=1`` (not a silent fallback to torch's ops that only makes CI slower),
and the sources build with the oldest GCC the project supports (GCC 11, Ubuntu 22.04's). And the C
interface is one header (csrc/batchscope.h) that agrees with Python: its prototypes with
cpu_kernels.SIGNATURES, the library's struct layouts and constants with the ctypes mirrors (a
library that differs is refused at load). A build whose vectors are narrower than the kernels' (a
CPU without AVX-512) is not used: torch's ops run, with the reason."""
from __future__ import annotations

import ctypes
import platform
import re
import shutil
import subprocess

import pytest

from engine import cpu_kernels

X86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="builds for x86-64-v2 and -v3")


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
        cpu_kernels.here.__wrapped__()


def test_without_the_requirement_a_broken_source_falls_back_and_says_why(broken_sources, monkeypatch, caplog):
    monkeypatch.delenv(cpu_kernels.REQUIRE_KERNELS, raising=False)
    assert cpu_kernels.here.__wrapped__().library is None
    assert "did not build" in caplog.text and "torch's ops are used instead" in caplog.text


@pytest.mark.skipif(shutil.which("gcc-11") is None, reason="gcc-11 is not installed (apt-get install gcc-11)")
def test_the_kernels_build_with_gcc_11(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(tmp_path))
    cpu_kernels.check_interface(cpu_kernels.this_tree("gcc-11"))


@X86
def test_a_build_whose_vectors_are_narrower_than_the_kernels_runs_torchs_ops(tmp_path, monkeypatch, caplog):
    """On a CPU with neither AVX-512 nor AVX2 (x86-64-v2: SSE's 128-bit registers) GCC cannot hold vec.h's
    16-float vectors in registers and keeps them in memory: on a Zen 3 host the engine ran 17x slower on
    such kernels than on torch's ops. Such a build is not used, with the reason said, also where kernels
    are required (not a C fault)."""
    flags = tuple(f if f != "-march=native" else "-march=x86-64-v2" for f in cpu_kernels.FLAGS)
    monkeypatch.setattr(cpu_kernels, "FLAGS", flags)
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(tmp_path))
    monkeypatch.setenv(cpu_kernels.REQUIRE_KERNELS, "1")
    here = cpu_kernels.here.__wrapped__()
    assert here.library is None and here.reason.startswith("this CPU's vectors are 128-bit, the CPU kernels' 512-bit")
    assert "128-bit" in caplog.text and "torch's ops are used instead" in caplog.text


@X86
def test_the_kernels_build_for_a_cpu_without_avx512(tmp_path):
    """An AVX2 CPU builds the same sources on 8-float vectors (vec.h), wherever CI runs: a source that
    does not compile for AVX2 fails CI on an AVX-512 host too (test_cpu_kernels checks what it computes
    where the CPU has AVX2), and its vectors fit AVX2's registers."""
    flags = [f if f != "-march=native" else "-march=x86-64-v3" for f in cpu_kernels.FLAGS]
    sources = sorted(str(f) for f in cpu_kernels.SOURCES.glob("*.c"))
    done = subprocess.run([cpu_kernels.compiler(), *flags, *sources, "-o", str(tmp_path / "avx2.so")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert cpu_kernels.vector_bits(cpu_kernels.open_library(tmp_path / "avx2.so")) == (256, 256)


TILE_SHAPES = r"""
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "amx.h"
__attribute__((noinline)) static int differs(int a, int b) {
    const int rows[8] = {a, a, b, b, a, b, 16, 16};
    configure_tiles(rows);
    TileConfig back;
    _tile_storeconfig(&back);
    int bad = 0;
    for (int t = 0; t < 8; t++) bad |= back.colsb[t] != 64 || back.rows[t] != (rows[t] ? rows[t] : 1);
    _tile_release();
    return bad;
}
int main(void) {
    if (syscall(SYS_arch_prctl, 0x1023, 18)) return 2;
    int bad = 0;
    for (int a = 1; a <= 16; a++)
        for (int b = 0; b <= 16; b++) bad |= differs(a, b);
    puts(bad ? "differs" : "same");
    return bad;
}
"""


@pytest.mark.skipif(not cpu_kernels.amx(), reason="no AMX tiles here")
def test_the_tile_configuration_reaches_the_cpu_as_written(tmp_path):
    """configure_tiles (amx.h) writes the whole 64-byte configuration before LDTILECFG reads it: GCC 12's
    _tile_loadconfig names only its operand's first 8 bytes as read, and GCC dropped stores to the
    rest (a fault at LDTILECFG, seen in a variant of gemm_amx.c and in this program)."""
    (tmp_path / "tiles.c").write_text(TILE_SHAPES)
    built = subprocess.run([cpu_kernels.compiler(), "-O3", "-march=native", f"-I{cpu_kernels.SOURCES}",
                            str(tmp_path / "tiles.c"), "-o", str(tmp_path / "tiles")],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(tmp_path / "tiles")], capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout.strip()) == (0, "same")


HEADER = cpu_kernels.SOURCES / "batchscope.h"
C_TYPES = {"int": ctypes.c_int.__name__, "int64_t": ctypes.c_int64.__name__, "float": ctypes.c_float.__name__,
           "void": None}


@pytest.fixture(scope="module")
def library():
    """This tree's build for this CPU, used or not (unfit)."""
    return cpu_kernels.this_tree(cpu_kernels.compiler())


def header_prototypes() -> dict[str, tuple[str | None, list[str]]]:
    """name -> (return ctype, argument ctypes) of every function batchscope.h declares."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    found = {}
    for match in re.finditer(r"^([\w ]+?\**)\s*(bs_\w+)\(([^)]*)\);", text, re.M):
        ret, name, args = match.groups()
        params = [] if args.strip() == "void" else [a.strip() for a in args.split(",")]
        found[name] = (_ctype(ret, "*" in ret), [_ctype(p.rsplit(" ", 1)[0], "*" in p) for p in params])
    return found


def _ctype(type_name: str, pointer: bool) -> str | None:
    return ctypes.c_void_p.__name__ if pointer else C_TYPES[type_name.split()[-1]]


def test_every_function_python_calls_is_declared_alike_in_the_one_header():
    declared = header_prototypes()
    for name, argtypes in cpu_kernels.SIGNATURES.items():
        restype = ctypes.c_int if name in cpu_kernels.RETURNS_INT else (
            ctypes.c_int64 if name in cpu_kernels.RETURNS_I64 else None)
        expected = (None if restype is None else restype.__name__, [t.__name__ for t in argtypes])
        assert declared.get(name) == expected, name


def test_no_c_file_declares_another_files_functions():
    """batchscope.h declares every export; a .c file re-declaring one could drift from it."""
    for source in cpu_kernels.SOURCES.glob("*.c"):
        text = re.sub(r"/\*.*?\*/", "", source.read_text(), flags=re.S)
        assert not re.findall(r"^[A-Za-z_][\w ]*\**\s*\bbs_\w+\([^{;]*\);", text, re.M), source.name
        assert '#include "batchscope.h"' in text, source.name


@pytest.mark.parametrize("targets", [(), ("-mamx-tile", "-mamx-bf16", "-mavx512bf16", "-mavx512f")])
def test_every_exported_function_has_its_prototype_in_the_header(targets):
    """Built with -Werror=missing-prototypes (here, and with the AMX branches compiled in)."""
    compiler = cpu_kernels.compiler()
    sources = sorted(map(str, cpu_kernels.SOURCES.glob("*.c")))
    run = subprocess.run([compiler, *cpu_kernels.FLAGS, *targets, "-fsyntax-only", "-Werror=missing-prototypes",
                          *sources], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_the_library_and_ctypes_agree_on_every_struct_field_and_constant(library):
    assert cpu_kernels.c_interface(library) == cpu_kernels.python_interface()
    assert "offsetof(StepDesc, scale)" in cpu_kernels.python_interface()


def test_a_library_whose_structs_differ_is_refused(monkeypatch, library):
    class Shifted(ctypes.Structure):  # StepDesc with `scale` moved up one place
        _fields_ = [*cpu_kernels.StepDesc._fields_[:14], ("scale", ctypes.c_float),
                    *cpu_kernels.StepDesc._fields_[14:15], *cpu_kernels.StepDesc._fields_[16:]]
    Shifted.__name__ = "StepDesc"
    monkeypatch.setattr(cpu_kernels, "MIRRORED", (*cpu_kernels.MIRRORED[:-1], Shifted))
    with pytest.raises(cpu_kernels.InterfaceError, match=r"offsetof\(StepDesc, scale\): C \d+, ctypes \d+"):
        cpu_kernels.check_interface(library)


def test_a_library_of_another_abi_version_is_refused(monkeypatch, library):
    monkeypatch.setattr(cpu_kernels, "ABI_VERSION", cpu_kernels.ABI_VERSION + 1)
    with pytest.raises(cpu_kernels.InterfaceError, match="ABI version"):
        cpu_kernels.check_interface(library)


def test_a_library_that_fails_the_check_is_not_used(monkeypatch, caplog):
    """Refused like a failed build: torch's ops with a warning, or an error where kernels are required."""
    version = cpu_kernels.ABI_VERSION  # the library's
    monkeypatch.setattr(cpu_kernels, "ABI_VERSION", version + 1)
    monkeypatch.delenv(cpu_kernels.REQUIRE_KERNELS, raising=False)
    assert cpu_kernels.here.__wrapped__().library is None and "ABI version" in caplog.text
    monkeypatch.setenv(cpu_kernels.REQUIRE_KERNELS, "1")
    refused = f"BATCHSCOPE_REQUIRE_KERNELS=1 and the CPU kernels' ABI version is {version},"
    with pytest.raises(RuntimeError, match=refused):
        cpu_kernels.here.__wrapped__()


def test_the_build_knows_the_vectors_of_this_cpu(library):
    """What unfit reads is the CPU's own: 512-bit vectors with AVX-512F, 256 with AVX2; the kernels' own
    are as wide (vec.h: 16 floats, or 8)."""
    flags = cpu_kernels._cpu_flags().split()
    if b"avx" not in flags:
        pytest.skip("not an x86 CPU with AVX (no flags line in /proc/cpuinfo)")
    bits = 512 if b"avx512f" in flags else 256
    eight_floats = bits == 512 or (b"avx2" in flags and b"fma" in flags)
    assert cpu_kernels.vector_bits(library) == (bits, bits if eight_floats else 512)
