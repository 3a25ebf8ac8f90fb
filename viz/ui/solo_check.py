"""``POST /batchscope/solo-check?request=ID``: the solo check of a finished request
(``AsyncLLM.solo_check``, engine/solo_check.py), for the button on its card.

Only a visitor who may read the request (its owner, or anyone under ``--shared-view``) may
check it, since the answer tells about its tokens; anyone else gets the same 404 as for an
unknown id. The solo run is a request of its own, ``<id>-solo<n>``, claimed for the same owner
and label before it starts, so it shows on the dashboard as the original did. The check blocks
until the engine is idle and the run is done, so the route runs on a worker thread.
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from fastapi import FastAPI, HTTPException, Query, Request

from ..live.hub import TelemetryHub
from ..live.identity import VisitorIdentity
from ..live.privacy import Audience

if TYPE_CHECKING:
    from engine import AsyncLLM

SOLO_TIMEOUT_S = 120.0
_solo_numbers = itertools.count(1)


def install_solo_check_route(app: FastAPI, llm: AsyncLLM, hub: TelemetryHub,
                             identity: VisitorIdentity) -> None:
    """Answers the check's report (``SoloReport.to_dict``); 404 not the visitor's or not kept,
    409 not comparable (still running, sampled without a seed), 503 engine gone, 504 busy."""
    @app.post("/batchscope/solo-check", include_in_schema=False)
    def solo_check(request: Request, request_id: str = Query(alias="request")) -> dict:
        owner, label = hub.claimed(request_id)
        if not Audience(identity.owner(request.cookies), hub.shared_view).can_read(owner):
            raise HTTPException(404, f"no request {request_id!r} of yours")
        solo_id = f"{request_id}-solo{next(_solo_numbers)}"
        hub.claim(solo_id, owner, label)
        try:
            return llm.solo_check(request_id, solo_id, SOLO_TIMEOUT_S).to_dict()
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from None
        except ValueError as exc:
            raise HTTPException(409, str(exc)) from None
        except TimeoutError as exc:
            raise HTTPException(504, str(exc)) from None
        except RuntimeError as exc:  # EngineDeadError, or the solo run failed
            raise HTTPException(503, str(exc)) from None
