#!/usr/bin/env python3
"""A streamable-HTTP MCP server built with the official Python SDK (PyPI `mcp`), for the agent's MCP
client tests over HTTP (services/agent/tests/mcp_http.rs).

Usage: http_server.py TOKEN_FILE [CERT_FILE KEY_FILE]
Serves one tool, `echo`, at http://127.0.0.1:PORT/mcp (https:// when a certificate and its key are
given) and prints PORT on its first line once the socket listens. Every request must carry
`Authorization: Bearer <the token in TOKEN_FILE>`; any other gets 401.
"""
import asyncio
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

token = open(sys.argv[1]).read().strip()
cert, key = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else (None, None)

server = MCPServer("echo")


@server.tool()
def echo(text: str) -> str:
    """Echoes its text."""
    return f"echo: {text}"


inner = server.streamable_http_app(stateless_http=True, json_response=True)


async def app(scope, receive, send):
    """The MCP app behind a bearer-token check."""
    if scope["type"] == "http":
        headers = dict(scope.get("headers") or [])
        if headers.get(b"authorization", b"").decode() != f"Bearer {token}":
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
    await inner(scope, receive, send)


sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
sock.listen(64)
print(sock.getsockname()[1], flush=True)
config = uvicorn.Config(app, log_level="warning", ssl_certfile=cert, ssl_keyfile=key, lifespan="on")
asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))
