# Copyright 2026. Licensed under the Apache License, Version 2.0.
from __future__ import annotations

from typing import Iterator

import pytest

from agentrun import Client
from agentrun.conformance import Server


@pytest.fixture
def server() -> Iterator[Server]:
    with Server() as s:
        yield s


@pytest.fixture
def client(server: Server) -> Client:
    return Client.from_env(server.env)
