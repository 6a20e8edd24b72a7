# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""The only agentrun-specific part of the examples: an official `openai`
client pointed at the gateway. base_url is the model door
($OPENAI_BASE_URL); the API key is the pod's projected token, re-read on
every request (the kubelet rotates it); the gateway's CA is trusted."""

from __future__ import annotations

import os
import ssl

import openai


def read_token() -> str:
    with open(os.environ["AGENTRUN_TOKEN_FILE"], encoding="utf-8") as f:
        return f.read().strip()


def openai_client() -> openai.OpenAI:
    tls = ssl.create_default_context()
    ca = os.environ.get("AGENTRUN_GATEWAY_CA_FILE")
    if ca:
        tls.load_verify_locations(cafile=ca)
    return openai.OpenAI(
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key=read_token,  # a callable: called for every request
        http_client=openai.DefaultHttpxClient(verify=tls),
    )
