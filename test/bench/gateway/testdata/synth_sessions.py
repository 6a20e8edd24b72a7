"""Synthesises the two agent sessions the gateway benchmark replays (reservation.go).

Not captured from the real tools: built from the request shapes brief section 10 and
issue 27 record for Claude Code 2.1.328 (POST /v1/messages, stream true, max_tokens
128000, 12 tools, a long system prompt, the whole conversation every turn, the cache
marker on the last message) and Codex 0.169.0 (POST /responses, stream true, 10 tools,
tool_choice, parallel_tool_calls, reasoning, store false, include, prompt_cache_key,
text, client_metadata; the whole input every turn, with each turn's reasoning item).
Each turn records the usage a provider would report for it, at 4 bytes of prompt per
token. Deterministic: run `python3 synth_sessions.py` here to rewrite the fixtures.
"""
import json, math, random

rnd = random.Random(27)
WORDS = ("the test fails because the handler returns early when the context is cancelled "
         "so the reservation is never settled and the grant looks spent while nothing runs").split()


def text(n):
    out = []
    while sum(len(w) + 1 for w in out) < n:
        out.append(rnd.choice(WORDS))
    return " ".join(out)[:n]


def schema(i):
    return {"type": "object", "properties": {f"arg{j}": {"type": "string", "description": text(120)} for j in range(4)},
            "required": ["arg0"], "additionalProperties": False}


def tokens(b):
    return math.ceil(b / 4)


def size(v):
    return len(json.dumps(v, separators=(",", ":")))


def claude():
    names = ["Task", "Bash", "Glob", "Grep", "LS", "Read", "Edit", "MultiEdit", "Write", "WebFetch", "TodoWrite", "WebSearch"]
    base = {"system": [{"type": "text", "text": "You are Claude Code. " + text(14000),
                        "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": n, "description": text(1200), "input_schema": schema(i)} for i, n in enumerate(names)],
            "metadata": {"user_id": "user_bench_session"}, "max_tokens": 128000, "stream": True}
    turns, msgs = [], []
    pending = [{"role": "user", "content": [{"type": "text", "text": "Fix the failing test in internal/gateway."}]}]
    for i in range(30):
        msgs += pending
        prompt = tokens(size(base["system"]) + size(base["tools"]) + size(msgs))
        answer = {"role": "assistant", "content": [
            {"type": "text", "text": text(rnd.randint(80, 400))},
            {"type": "tool_use", "id": f"toolu_{i:02d}", "name": rnd.choice(names[1:9]),
             "input": {"arg0": text(rnd.randint(20, 200))}}]}
        output = tokens(size(answer))
        fresh = tokens(sum(size(m) for m in pending))
        turns.append({"append": pending, "usage": {"input_tokens": 4, "cache_creation_input_tokens": fresh,
                                                   "cache_read_input_tokens": max(prompt - fresh - 4, 0),
                                                   "output_tokens": output}})
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i:02d}",
                                               "content": text(rnd.choice([300, 1500, 4000, 9000]))}]}
        pending = [answer, result]
    return {"door": "messages", "shape": "Claude Code 2.1.328 (synthesised)", "base": base, "turns": turns}


def codex():
    names = ["shell", "apply_patch", "update_plan", "view_image", "read_file", "list_dir", "grep_files", "web_search_call",
             "exec_command", "write_stdin"]
    base = {"instructions": "You are Codex, a coding agent. " + text(11000),
            "tools": [{"type": "function", "name": n, "description": text(700), "strict": False, "parameters": schema(i)}
                      for i, n in enumerate(names)],
            "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"effort": "medium", "summary": "auto"},
            "store": False, "stream": True, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "0199-bench-session", "text": {"verbosity": "medium"},
            "client_metadata": {"originator": "codex_exec"}}
    turns, items = [], []
    pending = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Make the build pass."}]}]
    for i in range(30):
        items += pending
        prompt = tokens(len(base["instructions"]) + size(base["tools"]) + size(items))
        answer = [{"type": "reasoning", "id": f"rs_{i:02d}", "summary": [],
                   "encrypted_content": "gAAAAA" + "".join(rnd.choice("abcdefghijklmnop0123456789") for _ in range(1200))},
                  {"type": "function_call", "id": f"fc_{i:02d}", "call_id": f"call_{i:02d}", "name": rnd.choice(names[:3]),
                   "arguments": json.dumps({"command": ["bash", "-lc", text(rnd.randint(20, 160))]})}]
        output = tokens(size(answer))
        turns.append({"append": pending, "usage": {"input_tokens": prompt,
                                                   "cached_tokens": max(prompt - tokens(sum(size(m) for m in pending)), 0),
                                                   "output_tokens": output}})
        result = {"type": "function_call_output", "call_id": f"call_{i:02d}",
                  "output": text(rnd.choice([200, 1200, 3000, 8000]))}
        pending = answer + [result]
    return {"door": "responses", "shape": "Codex 0.169.0 (synthesised)", "base": base, "turns": turns}


for name, s in (("claude-code-session.json", claude()), ("codex-session.json", codex())):
    with open(name, "w") as f:
        json.dump(s, f, indent=1)
        f.write("\n")
