#!/usr/bin/env python3
# The CLIs' start-up cost: from exec to their first model request, 5 runs each, against a
# local endpoint that refuses it at once (429, x-should-retry: false). Needs npm ci here.
#   python3 examples/harnesses/measure_startup.py
import tempfile, json, http.server, threading, subprocess, time, os, sys, statistics
first = {}
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self,*a): pass
    def do_POST(self):
        n=int(self.headers.get('content-length',0)); self.rfile.read(n)
        first.setdefault('t', time.monotonic())
        self.send_response(429); self.send_header('content-type','application/json'); self.send_header('x-should-retry','false'); self.end_headers()
        self.wfile.write(b'{"type":"error","error":{"type":"rate_limit_error","message":"stop"}}')
    def do_GET(self):
        self.send_response(200); self.send_header('content-type','application/json'); self.end_headers(); self.wfile.write(b'{"data":[]}')
srv=http.server.ThreadingHTTPServer(('127.0.0.1',18998),H); threading.Thread(target=srv.serve_forever,daemon=True).start()
binp=os.path.join(os.path.dirname(os.path.abspath(__file__)), 'node_modules', '.bin')
def run(cmd, env):
    first.clear(); t0=time.monotonic()
    subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return (first['t']-t0)*1000 if 't' in first else None
res={}
for name in ['claude','codex']:
    xs=[]
    for i in range(5):
        home=tempfile.mkdtemp(prefix=f'startup-{name}-'); os.makedirs(home+'/.codex',exist_ok=True)
        env=dict(os.environ, HOME=home)
        if name=='claude':
            env.update(ANTHROPIC_BASE_URL='http://127.0.0.1:18998', ANTHROPIC_AUTH_TOKEN='t', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC='1', DISABLE_TELEMETRY='1', DISABLE_AUTOUPDATER='1', ENABLE_TOOL_SEARCH='false')
            cmd=[binp+'/claude','-p','hi','--output-format','json','--model','m']
        else:
            open(home+'/.codex/config.toml','w').write('model="m"\nmodel_provider="x"\n[model_providers.x]\nname="x"\nbase_url="http://127.0.0.1:18998/v1"\nenv_key="TOK"\nwire_api="responses"\n')
            env.update(TOK='t', CODEX_HOME=home+'/.codex')
            cmd=[binp+'/codex','exec','--skip-git-repo-check','--json','hi']
        xs.append(run(cmd, env))
    res[name]=xs
    print(name, ['%.0f'%x for x in xs], 'median %.0f ms'%statistics.median(xs))
