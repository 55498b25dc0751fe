#!/usr/bin/env python3
"""An OpenAI-compatible API that answers at once, for a chat app's own time (`measure-open-webui.py --stand-in`):
every streamed answer is "Hello there.", every whole one a title/tags/follow-ups JSON.

    python lab/scripts/openai-stand-in.py PORT
"""
from __future__ import annotations

import json
import sys

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

app = FastAPI()
WHOLE = '{"title": "Hello", "tags": ["General"], "follow_ups": ["Why?"]}'


def chunk(delta: dict, finish: str | None = None) -> str:
    body = {"id": "stand-in", "object": "chat.completion.chunk", "created": 0, "model": "cascade",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n"


@app.get("/health")
def health() -> dict:
    return {"status": "ok"}


@app.get("/v1/models")
def models() -> dict:
    return {"object": "list", "data": [{"id": "cascade", "object": "model", "created": 0, "owned_by": "stand-in"}]}


@app.post("/v1/chat/completions")
async def chat(request: Request):
    body = await request.json()
    if body.get("stream"):
        pieces = [chunk({"content": "Hello"}), chunk({"content": " there."}), chunk({}, "stop"), "data: [DONE]\n\n"]
        return StreamingResponse(iter(pieces), media_type="text/event-stream")
    return JSONResponse({"id": "stand-in", "object": "chat.completion", "created": 0, "model": "cascade",
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": WHOLE},
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
