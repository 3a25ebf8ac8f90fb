"""The dashboard's own ES modules inside a single-file HTML report (one implementation: the
report's request autopsy is the live page's code, not a copy).

A report opens from a file with no server, so the modules travel in the page: each module of
assets/js that the entry module imports, directly or not, becomes a ``data:`` URL in an import
map, and its relative imports (``from "./lanes.js"``) are rewritten to the map's bare names
(``from "batchscope/js/lanes.js"``), which resolve from inside a ``data:`` module where a
relative name could not. Only what the entry module needs is included.
"""
from __future__ import annotations

import base64
import json
import posixpath
import re
from pathlib import Path

from ..paths import ASSETS

CLIENT = ASSETS / "js"
PREFIX = "batchscope/js/"
IMPORT = re.compile(r'(\b(?:from|import)\s*)"(\.{1,2}/[^"]+)"')


def module_map(entry: str, root: Path = CLIENT) -> dict[str, str]:
    """Bare module name -> ``data:`` URL of ``entry`` (a path under ``root``) and all it imports."""
    urls: dict[str, str] = {}
    pending = [posixpath.normpath(entry)]
    while pending:
        path = pending.pop()
        if PREFIX + path in urls:
            continue
        source = (root / path).read_text(encoding="utf-8")
        here = posixpath.dirname(path)

        def bare(match: re.Match, here: str = here) -> str:
            target = posixpath.normpath(posixpath.join(here, match[2]))
            pending.append(target)
            return f'{match[1]}"{PREFIX}{target}"'

        rewritten = IMPORT.sub(bare, source)
        urls[PREFIX + path] = "data:text/javascript;base64," + base64.b64encode(
            rewritten.encode("utf-8")).decode("ascii")
    return urls


def import_map_html(entry: str) -> str:
    """The ``<script type="importmap">`` that makes ``batchscope/js/<entry>`` importable."""
    return f'<script type="importmap">{json.dumps({"imports": module_map(entry)})}</script>'


def json_script(element_id: str, data) -> str:
    """``data`` as a JSON script element (no ``<`` in it, so no string can end it early)."""
    text = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id="{element_id}">{text}</script>'
