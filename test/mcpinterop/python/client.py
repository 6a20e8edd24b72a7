# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""The official MCP Python SDK (mcp on PyPI) against agentrun's tool door.

Run by test/mcpinterop (go test), once per protocol revision:

    python client.py URL TOKEN REVISION

prints one JSON object: the negotiated revision, the listed tools, and the
result of each scenario call (search, a refused call, a call that waits for
approval, a call the tool server never answers). A step that raises is
reported as {"error": ...} so the Go test names what failed.
"""

import asyncio
import json
import sys

import httpx2
import mcp.client.session as session
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS


def result(res):
    text = "".join(getattr(c, "text", "") for c in res.content)
    return {"isError": bool(res.is_error), "text": text, "meta": res.meta or {}}


async def step(out, name, coro):
    try:
        out[name] = await coro
    except Exception as e:  # noqa: BLE001 - reported to the Go test
        out[name] = {"error": f"{type(e).__name__}: {e}"}


async def main(url, token, revision):
    if revision in MODERN_PROTOCOL_VERSIONS:
        mode = "auto"  # server/discover, as a new user's client does
    elif revision in HANDSHAKE_PROTOCOL_VERSIONS:
        # The handshake offers the SDK's newest handshake revision; a client
        # built when an older one was newest offers that one instead.
        session.LATEST_HANDSHAKE_VERSION = revision
        mode = "legacy"
    else:
        print(json.dumps({"skip": f"mcp (Python) does not speak {revision}"}))
        return
    out = {}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as c:
            out["protocolVersion"] = c.protocol_version

            async def tools():
                res = await c.list_tools()
                return sorted(t.name for t in res.tools)

            await step(out, "tools", tools())

            async def call(name, args):
                return result(await c.call_tool(name, args))

            await step(out, "call", call("search", {"q": "vector databases"}))
            await step(out, "refused", call("shell.exec", {}))
            await step(out, "approval", call("report.publish", {"section": "Overview", "content": revision}))
            await step(out, "timeout", call("ticket.create", {"title": "disk full " + revision}))
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
