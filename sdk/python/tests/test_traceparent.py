"""The pod's TRACEPARENT is sent to the gateway as the traceparent header."""

import http.server
import threading

from agentrun import Client

TP = "00-5d0c3f6e9a414b6e8f2e0c1d2e3f4a5b-00f067aa0ba902b7-01"


def test_traceparent_from_env_is_sent():
    seen = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen[self.path] = self.headers.get("traceparent")
            body = b"{}"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = "http://127.0.0.1:%d" % srv.server_port
        with_tp = Client.from_env({"AGENTRUN_GATEWAY_URL": url, "AGENTRUN_TOKEN_FILE": "", "TRACEPARENT": TP}, token="t")
        with_tp.call("GET", "/agentrun/v1/self")
        assert seen["/agentrun/v1/self"] == TP
        without = Client(url, token="t")
        without.call("GET", "/other")
        assert seen["/other"] is None
    finally:
        srv.shutdown()
