"""The compare's routes: ``GET /compare/state`` (what the page polls: idle, running which
side, done, failed, and the latest result's id) and ``GET /compare/result`` (the latest
finished compare: its pattern, both sides' configurations, records and arrivals). Both are
cheap reads of the runner's state and never wait for a run."""
from __future__ import annotations

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse

from .runner import CompareRunner


def install_compare_routes(app: FastAPI, runner: CompareRunner) -> None:
    @app.get("/compare/state", include_in_schema=False)
    def compare_state() -> JSONResponse:
        return JSONResponse(runner.state(), headers={"Cache-Control": "no-store"})

    @app.get("/compare/result", include_in_schema=False)
    def compare_result() -> JSONResponse:
        result = runner.result()
        if result is None:
            raise HTTPException(404, "no compare has finished yet")
        return JSONResponse(result, headers={"Cache-Control": "no-store"})
