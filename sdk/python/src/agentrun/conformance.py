# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""Start the gateway's protocol conformance server (./test/conformance/server)
for tests: a real gateway in front of one attempt; see test/conformance."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from typing import Any, Optional, Sequence


def repo_root() -> str:
    d = os.path.dirname(os.path.abspath(__file__))
    while d != "/":
        if os.path.exists(os.path.join(d, "go.mod")) and os.path.isdir(os.path.join(d, "test", "conformance")):
            return d
        d = os.path.dirname(d)
    raise RuntimeError("cannot find the agentrun repository root")


class Server:
    """A running conformance server; manifest is the JSON line it printed."""

    def __init__(self, args: Sequence[str] = ()) -> None:
        binary = os.environ.get("AGENTRUN_CONFORMANCE_SERVER")
        if binary:
            cmd = [binary, *args]
            cwd = None
        else:
            cmd = ["go", "run", "./test/conformance/server", *args]
            cwd = repo_root()
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            raise RuntimeError(f"the conformance server exited ({self.proc.returncode}) without a manifest")
        self.manifest: dict[str, Any] = json.loads(line)
        self._lock = threading.Lock()

    @property
    def env(self) -> dict[str, str]:
        """The environment of an attempt pod of this server."""
        return dict(self.manifest["env"])

    def command(self, **cmd: Any) -> Any:
        """Send one command (approve=, deny=, terminate=True, status=True)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            ans = json.loads(self.proc.stdout.readline())
        if isinstance(ans, dict) and "error" in ans:
            raise RuntimeError(ans["error"])
        return ans

    def status(self) -> dict[str, Any]:
        """The RunAttempt as the fake API server holds it: {"spec", "status"}."""
        return self.command(status=True)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: Optional[object]) -> None:
        self.close()
