# Copyright 2026. Licensed under the Apache License, Version 2.0.
"""The only agentrun-specific part of the examples: an official `openai`
client pointed at the gateway. base_url is the model door
($OPENAI_BASE_URL); the API key is the pod's projected token, re-read on
every request (the kubelet rotates it); the gateway's CA is trusted.
anthropic_client() is the official `anthropic` client on the gateway's
Messages door ($ANTHROPIC_BASE_URL; the SDK appends /v1/messages), the
token sent as its x-api-key."""

from __future__ import annotations

import os
import ssl

import anthropic
import openai


def read_token() -> str:
    with open(os.environ["AGENTRUN_TOKEN_FILE"], encoding="utf-8") as f:
        return f.read().strip()


def gateway_tls() -> ssl.SSLContext:
    tls = ssl.create_default_context()
    ca = os.environ.get("AGENTRUN_GATEWAY_CA_FILE")
    if ca:
        tls.load_verify_locations(cafile=ca)
    return tls


def openai_client() -> openai.OpenAI:
    tls = gateway_tls()
    return openai.OpenAI(
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key=read_token,  # a callable: called for every request
        http_client=openai.DefaultHttpxClient(verify=tls),
    )


def anthropic_client() -> anthropic.Anthropic:
    # The anthropic SDK takes its key as a string: read once, which outlives
    # a run's minutes (the kubelet rotates the token after most of an hour).
    return anthropic.Anthropic(
        base_url=os.environ["ANTHROPIC_BASE_URL"],
        api_key=read_token(),
        http_client=anthropic.DefaultHttpxClient(verify=gateway_tls()),
    )
