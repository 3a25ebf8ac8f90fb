"""The page's own files, installed on the FastAPI app before Gradio takes "/".

- ``/plotly.min.js``: plotly.js from the installed plotly wheel (never a CDN).
- ``/batchscope/<path>``: the browser client from assets/ (scripts, styles, and
  ``strings.json``, the strings table both the page and the views read).

The telemetry transports are in transport.py, the replay controls in viz/sources/replay_channels.py.
"""
from __future__ import annotations

from pathlib import Path

import plotly
from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse

from ..paths import ASSETS

PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
CLIENT_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css",
                ".json": "application/json", ".svg": "image/svg+xml"}
HEAD = (
    '<script src="/plotly.min.js"></script>\n'
    '<link rel="stylesheet" href="/batchscope/dashboard.css">\n'
    '<link rel="stylesheet" href="/batchscope/panels.css">\n'
    '<link rel="stylesheet" href="/batchscope/stage.css">\n'
    '<script type="module" src="/batchscope/js/main.js"></script>\n'
)
REPLAY_HEAD = HEAD  # js/main.js starts the replay bar when the page has one


def install_page_routes(app: FastAPI) -> None:
    @app.get("/plotly.min.js", include_in_schema=False)
    def plotly_js() -> FileResponse:
        return FileResponse(PLOTLY_JS, media_type="text/javascript",
                            headers={"Cache-Control": "public, max-age=86400"})

    @app.get("/batchscope/{path:path}", include_in_schema=False)
    def client_file(path: str) -> FileResponse:
        file = client_path(path)
        if file is None:
            raise HTTPException(404)
        return FileResponse(file, media_type=CLIENT_TYPES[file.suffix],
                            headers={"Cache-Control": "no-cache"})


def client_path(path: str) -> Path | None:
    """The file of assets/ that ``/batchscope/<path>`` names, if it is a client file."""
    file = (ASSETS / path).resolve()
    if not file.is_relative_to(ASSETS) or file.suffix not in CLIENT_TYPES or not file.is_file():
        return None
    return file
