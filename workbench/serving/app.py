"""The HTTP face of a served model (FastAPI, run by uvicorn: workbench.serving.server).

    POST /predict  {"inputs": [...]}  ->  {"outputs": [...]}   (one sample, or a list of them)
    GET  /health                      ->  the model, its variant, its input, the batching, counts

A request that does not fit gets a 4xx with one line in "error" saying what was wrong; the
server goes on serving. The body is read up to MAX_BODY bytes and no further.
"""

from __future__ import annotations

import json
import os
import secrets
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from .batching import Batcher
from .bounds import MAX_BODY
from .served import BadRequest, Served


def refuse(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def read_body(request: Request) -> bytes:
    """The body, refused (413) past MAX_BODY whether or not the client said its length."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise BadRequest(413, f"the body is {int(declared):,} bytes; at most {MAX_BODY:,} per request")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise BadRequest(413, f"the body is over {MAX_BODY:,} bytes; at most {MAX_BODY:,} per request")
    return bytes(body)


def make_app(
    served: Served, batcher: Batcher, about: dict, token: str | None = None, on_ready=lambda: None
) -> FastAPI:
    """`about`: what the health endpoint says of the server (threads and why, the batching);
    `on_ready()` is called once it takes requests."""
    counts = {"answered": 0, "refused": 0}

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        on_ready()
        yield
        await batcher.stop()

    app = FastAPI(
        title=f"workbench: {served.name} ({served.variant})", docs_url=None, redoc_url=None, lifespan=lifespan
    )

    def unauthorized(request: Request) -> JSONResponse | None:
        """The refusal of a request without the token, where the server has one (checked in each
        handler: an HTTP middleware cost every request a quarter of a millisecond)."""
        if token is None:
            return None
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if secrets.compare_digest(given.encode(), token.encode()):
            return None
        counts["refused"] += 1
        return refuse(401, "this server needs its token: Authorization: Bearer TOKEN")

    @app.get("/health")
    async def health(request: Request):
        if denied := unauthorized(request):
            return denied
        return {
            "status": "ok",
            "pid": os.getpid(),  # a load on this machine counts the server's CPU as its own work
            "model": served.name,
            "variant": served.variant,
            **({"variant_note": served.note} if served.note else {}),
            "input": served.schema(),
            **about,
            "batches": batcher.batches,
            "samples": batcher.samples,
            **counts,
        }

    @app.post("/predict")
    async def predict(request: Request):
        if denied := unauthorized(request):
            return denied
        try:
            body = await read_body(request)
            try:
                payload = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise BadRequest(400, f"the body is not JSON: {e}") from None
            except RecursionError:
                raise BadRequest(400, "the body is JSON nested too deeply to read") from None
            x, single = served.read(payload)
        except BadRequest as e:
            counts["refused"] += 1
            return refuse(e.status, str(e))
        out = await batcher.infer(x)
        counts["answered"] += 1
        return {"outputs": (out[0] if single else out).tolist()}

    return app
