"""Reading a request body into a pydantic model, every failure an OpenAI-shaped 400 or 413."""
from __future__ import annotations

import json
from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from .errors import ApiError, bad_request

B = TypeVar("B", bound=BaseModel)


async def read_body(request: Request, model: type[B], max_bytes: int) -> B:
    raw = await _read_bytes(request, max_bytes)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise bad_request(f"the request body is not valid UTF-8 (byte {exc.start})",
                          code="invalid_json") from None
    except json.JSONDecodeError as exc:
        raise bad_request(f"the request body is not valid JSON: {exc.msg} (line {exc.lineno}, "
                          f"column {exc.colno})", code="invalid_json") from None
    except RecursionError:
        raise bad_request("the request body is nested too deeply", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object", code="invalid_json")
    try:  # "\ud800" is valid JSON but not valid Unicode; tokenizers cannot take it
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise bad_request("the request body contains an unpaired UTF-16 surrogate escape",
                          code="invalid_json") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        param = str(first["loc"][0]) if first["loc"] else None
        raise bad_request(f"{where}: {first['msg']}", param=param) from None


async def _read_bytes(request: Request, max_bytes: int) -> bytes:
    too_large = ApiError(413, f"the request body is larger than this server's limit of {max_bytes} bytes",
                         code="request_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)
