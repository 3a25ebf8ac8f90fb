"""The two wheels as a user installs them: ``pip wheel`` of the repository (the dashboard, its
assets, the ``batchscope`` command) and of integrations/vllm (the vLLM plugin), each installed
into a fresh venv and started there from a directory that has nothing to do with the checkout.

The fresh venvs download nothing: a .pth file lends them .venv's site-packages for the
dependencies, and the wheels are installed with ``--no-deps --no-index``. Each wheel is built
from a copy of the working tree's files, so that the build neither writes build/ and *.egg-info
into the checkout nor packs stale files an earlier build left there.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import plotly
import pytest

from support.server import free_port

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "integrations" / "vllm"
TRACE = ROOT / "assets" / "traces" / "smollm2-135m-instruct-cpu.jsonl.gz"
PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
CODE = ("batchscope", "engine", "serve", "viz")  # the dashboard wheel's packages
LEFT_OUT = {"assets/screenshot.png"}  # README's picture: the dashboard never reads it
START_TIMEOUT_S = 60


@dataclass
class Venv:
    path: Path
    site_packages: Path

    def command(self, name: str) -> str:
        return str(self.path / "bin" / name)

    def run(self, name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
        """``name`` of the venv's bin/, as a shell without BATCHSCOPE_INGEST runs it."""
        env = {k: v for k, v in os.environ.items() if k != "BATCHSCOPE_INGEST"}
        return subprocess.run([self.command(name), *args], cwd=cwd, capture_output=True, text=True,
                              timeout=120, env=env)


def checkout_files(under: Path) -> list[str]:
    """The working tree's files below ``under`` that git does not ignore, relative to it:
    tracked ones and new ones alike."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=under, capture_output=True, text=True, check=True).stdout
    return sorted({name for name in listed.split("\0") if name and (under / name).is_file()})


def build_wheel(source: Path, tmp: Path) -> Path:
    """``pip wheel --no-deps`` of ``source`` (.venv's pip and setuptools, no download)."""
    copy = tmp / "src"
    for name in checkout_files(source):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, copy / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "-w", str(tmp / "dist"), str(copy)],
                   check=True, capture_output=True, timeout=120)
    [wheel] = (tmp / "dist").glob("*.whl")
    return wheel


def fresh_venv(path: Path, wheel: Path) -> Venv:
    """A new venv (no pip of its own) with ``wheel`` installed by .venv's pip, and .venv's
    site-packages behind its own for the dependencies."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=60)
    python = str(path / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    lent = dict.fromkeys(sysconfig.get_path(kind) for kind in ("purelib", "platlib"))
    (Path(site) / "batchscope_test_dependencies.pth").write_text("".join(f"{p}\n" for p in lent))
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, timeout=120)
    return Venv(path, Path(site))


@pytest.fixture(scope="module")
def prerequisites() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout: the wheels are built from the working tree's files")
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("needs setuptools in this venv: the wheels are built without build isolation")


@pytest.fixture(scope="module")
def dashboard_wheel(prerequisites, tmp_path_factory) -> Path:
    return build_wheel(ROOT, tmp_path_factory.mktemp("dashboard_wheel"))


@pytest.fixture(scope="module")
def dashboard(dashboard_wheel, tmp_path_factory) -> Venv:
    return fresh_venv(tmp_path_factory.mktemp("dashboard") / "venv", dashboard_wheel)


@pytest.fixture(scope="module")
def plugin(prerequisites, tmp_path_factory) -> Venv:
    wheel = build_wheel(PLUGIN, tmp_path_factory.mktemp("plugin_wheel"))
    return fresh_venv(tmp_path_factory.mktemp("plugin") / "venv", wheel)


def test_the_wheel_holds_every_module_and_asset_and_the_command(dashboard_wheel):
    """pyproject.toml lists the packages by hand (assets/ ships as batchscope.assets): nothing
    of the checkout's code or client may be missing, and no generic top-level module added."""
    with zipfile.ZipFile(dashboard_wheel) as wheel:
        names = set(wheel.namelist())
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = wheel.read(entry_points).decode()
    files = checkout_files(ROOT)
    code = {f for f in files if f.split("/")[0] in CODE and (f.endswith(".py") or "/csrc/" in f)}
    assets = {"batchscope/" + f for f in files if f.startswith("assets/") and f not in LEFT_OUT}
    assert code - names == set() and assets - names == set()
    assert {n.split("/")[0] for n in names if "dist-info" not in n} == set(CODE)
    assert re.search(r"^batchscope = batchscope\.app:main$", scripts, re.M), scripts


def test_the_installed_command_documents_its_modes(dashboard, tmp_path):
    done = dashboard.run("batchscope", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--vllm" in done.stdout and "--replay" in done.stdout
    assert "batchscope --replay TRACE" in done.stdout  # the examples name the command that runs


def test_the_installed_dashboard_imports_from_its_venv(dashboard, tmp_path):
    """Run from an unrelated directory, the code and the assets are the wheel's, not the checkout's."""
    code = ("import importlib.util, json, viz.paths; print(json.dumps({**{m: importlib.util.find_spec(m).origin "
            "for m in ('batchscope.app', 'engine', 'serve.openai_api', 'viz.paths')}, "
            "'assets': str(viz.paths.ASSETS)}))")
    done = dashboard.run("python", "-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    places = json.loads(done.stdout)
    assert all(Path(p).is_relative_to(dashboard.site_packages) for p in places.values()), places
    assert Path(places["assets"]) == dashboard.site_packages / "batchscope" / "assets"


@contextmanager
def started(argv: list[str], cwd: Path) -> Iterator[str]:
    """The dashboard that ``argv`` starts on a free loopback port, once ``/`` answers (its URL);
    stopped after."""
    port = free_port()
    log = (cwd / "server.log").open("w")
    process = subprocess.Popen([*argv, "--host", "127.0.0.1", "--port", str(port)], cwd=cwd,
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while process.poll() is None and time.monotonic() < deadline:
            try:
                httpx.get(url + "/", timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail(f"{argv[0]} did not answer: {(cwd / 'server.log').read_text()[-2000:]}")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
        log.close()


def page_head(page: str) -> str:
    """The page's own <head> markup, which Gradio carries in its config (a JSON string)."""
    [literal] = re.findall(r'"head":("(?:[^"\\]|\\.)*")', page)
    return json.loads(literal)


def test_the_installed_command_replays_a_shipped_trace(dashboard, tmp_path):
    """``batchscope --replay`` from the wheel serves the page, its client and plotly.js: the real files."""
    trace = dashboard.site_packages / "batchscope" / "assets" / "traces" / TRACE.name
    with started([dashboard.command("batchscope"), "--replay", str(trace)], tmp_path) as url:
        page = httpx.get(url + "/", timeout=10)
        head = page_head(page.text)
        [plotly_src] = re.findall(r'<script src="([^"]*plotly[^"]*)"', head)
        [main_src] = re.findall(r'<script type="module" src="([^"]+)"', head)
        served_plotly = httpx.get(url + plotly_src, timeout=10)
        served_main = httpx.get(url + main_src, timeout=10)
    assert page.status_code == 200
    assert served_main.status_code == 200 and served_main.content == (ROOT / "assets/js/main.js").read_bytes()
    assert served_plotly.status_code == 200 and served_plotly.content == PLOTLY_JS.read_bytes()


def test_the_plugin_wheel_registers_with_vllm_and_stays_off_without_a_dashboard(plugin, tmp_path):
    code = ("import importlib.metadata as md, json, sys\n"
            "[ep] = [e for e in md.entry_points(group='vllm.general_plugins') if e.name == 'batchscope']\n"
            "ep.load()()\n"
            "print(json.dumps({'value': ep.value, 'dist': str(ep.dist.locate_file('')), "
            "'module': sys.modules['batchscope_vllm'].__file__, 'vllm': 'vllm' in sys.modules}))")
    done = plugin.run("python", "-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["value"] == "batchscope_vllm:register" and found["vllm"] is False
    assert Path(found["dist"]) == plugin.site_packages
    assert Path(found["module"]).is_relative_to(plugin.site_packages)
