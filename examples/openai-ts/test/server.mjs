// Copyright 2026. Licensed under the Apache License, Version 2.0.
//
// Starts the gateway's protocol conformance server (test/conformance/server):
// a real gateway in front of one attempt, playing the operator's part.
import { spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const exampleDir = dirname(dirname(fileURLToPath(import.meta.url)));
export const repoRoot = join(exampleDir, '..', '..');

export async function startServer(args = []) {
  const bin = process.env.AGENTRUN_CONFORMANCE_SERVER;
  const proc = bin
    ? spawn(bin, args, { stdio: ['pipe', 'pipe', 'inherit'] })
    : spawn('go', ['run', './test/conformance/server', ...args], { cwd: repoRoot, stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: proc.stdout });
  const it = lines[Symbol.asyncIterator]();
  const first = await it.next();
  if (first.done) throw new Error('the conformance server exited without a manifest');
  const manifest = JSON.parse(first.value);
  return {
    manifest,
    /** One stdin command: {approve}, {deny}, {terminate: true}, {status: true}. */
    async command(cmd) {
      proc.stdin.write(JSON.stringify(cmd) + '\n');
      const ans = JSON.parse((await it.next()).value);
      if (ans?.error) throw new Error(ans.error);
      return ans;
    },
    status() { return this.command({ status: true }); },
    async close() {
      proc.stdin.end();
      await new Promise((resolve) => (proc.exitCode !== null ? resolve() : proc.on('exit', resolve)));
    },
  };
}

/** Runs a script as an attempt pod would: node, with the pod's environment. */
export function runScript(server, script, ...args) {
  const out = spawnSync(process.execPath, [join(exampleDir, script), ...args], {
    env: { ...process.env, ...server.manifest.env }, encoding: 'utf8', timeout: 120_000,
  });
  if (out.status !== 0) throw new Error(`${script} exited ${out.status}:\n${out.stdout}\n${out.stderr}`);
  return out.stdout;
}
