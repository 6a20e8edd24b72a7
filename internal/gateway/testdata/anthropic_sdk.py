"""Drives the Messages door with the official anthropic package: a message,
a streamed message with a tool call, and a refusal at the grant. Prints one
JSON line of what it saw."""
import json
import os
import sys

import anthropic

client = anthropic.Anthropic(base_url=os.environ["GATEWAY_URL"], api_key=os.environ["POD_TOKEN"])
script = {"say": "hello from the door", "tokens": 40, "cacheReadTokens": 10}
out = {}
msg = client.messages.create(model=sys.argv[1], max_tokens=4096,
                             messages=[{"role": "user", "content": "hi"}], extra_body={"agentrun_scripted": script})
out["text"] = msg.content[0].text
out["usage"] = msg.usage.input_tokens + msg.usage.output_tokens + (msg.usage.cache_read_input_tokens or 0)
tool = {"say": "running", "tokens": 20, "tools": [{"id": "toolu_9", "name": "Bash", "arguments": {"command": "ls"}}]}
with client.messages.stream(model=sys.argv[1], max_tokens=1024, messages=[{"role": "user", "content": "ls"}],
                            tools=[{"name": "Bash", "input_schema": {"type": "object"}}],
                            extra_body={"agentrun_scripted": tool}) as s:
    final = s.get_final_message()
out["stop_reason"] = final.stop_reason
out["tool_input"] = [b.input for b in final.content if b.type == "tool_use"]
try:
    client.messages.create(model=sys.argv[1], max_tokens=10, messages=[{"role": "user", "content": "again"}])
except anthropic.RateLimitError as e:
    out["refused"] = {"status": e.status_code, "code": e.body["error"]["code"], "type": e.body["error"]["type"]}
print(json.dumps(out))
