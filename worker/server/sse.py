"""Server-sent events framing, as OpenAI streams it: ``data: <json>\\n\\n`` then ``data: [DONE]``."""

from __future__ import annotations

from pydantic import BaseModel

DONE = b"data: [DONE]\n\n"
MEDIA_TYPE = "text/event-stream"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def event(payload: BaseModel | dict) -> bytes:
    if isinstance(payload, BaseModel):
        text = payload.model_dump_json(exclude_none=False)
    else:
        import json

        text = json.dumps(payload, separators=(",", ":"))
    return f"data: {text}\n\n".encode()
