import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { expect } from "bun:test";
import { Webhook } from "standardwebhooks";
import { PayloadCheck } from "../support/webhook-payloads.ts";

export const ROOT = join(import.meta.dir, "..", "..");

/** SOURCE runs the command line from source, as `bun server/main.ts`. */
export const SOURCE = [process.execPath, join(ROOT, "server", "main.ts")];

/** tempDir makes a fresh directory under the system's temporary folder. */
export function tempDir(label: string): string {
  return mkdtempSync(join(tmpdir(), `crm-ops-${label}-`));
}

/** runCli runs one command to completion and returns its exit code and output. */
export function runCli(command: string[], options: { cwd?: string; env?: Record<string, string>; stdin?: string } = {}) {
  const result = Bun.spawnSync(command, {
    cwd: options.cwd ?? ROOT,
    env: options.env ?? { PATH: process.env.PATH ?? "" },
    stdin: options.stdin === undefined ? "ignore" : Buffer.from(options.stdin),
    stdout: "pipe",
    stderr: "pipe",
  });
  return { exitCode: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
}

export interface ServerProcess {
  url: string;
  proc: Subprocess<"ignore", "pipe", "pipe">;
  /** output returns everything the process wrote so far, stdout then stderr interleaved as read */
  output(): string;
  /** logLines parses the JSON log lines written so far */
  logLines(): Record<string, any>[];
  /** stopWith sends a signal and waits for the exit (see waitForExit) */
  stopWith(signal: "SIGTERM" | "SIGINT", killAfterMs?: number): Promise<{ exitCode: number | null; killed: boolean }>;
  /** waitForExit waits for the exit code; the process is killed if it has not exited after `killAfterMs` (a hang guard) */
  waitForExit(killAfterMs?: number): Promise<{ exitCode: number | null; killed: boolean }>;
}

/**
 * spawnServer starts `serve` in a child process and waits for its `listening on URL` line.
 * A process that exits or stays silent for 15 s fails the test (a hang guard, not a timing check).
 */
export async function spawnServer(command: string[], options: { cwd?: string; env?: Record<string, string> } = {}): Promise<ServerProcess> {
  const proc = Bun.spawn(command, {
    cwd: options.cwd ?? ROOT,
    env: options.env ?? { PATH: process.env.PATH ?? "" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  let text = "";
  let resolveListening: (url: string) => void;
  let rejectListening: (error: Error) => void;
  const listening = new Promise<string>((resolve, reject) => {
    resolveListening = resolve;
    rejectListening = reject;
  });
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) {
      text += decoder.decode(chunk, { stream: true });
      const url = /listening on (http:\/\/\S+)/.exec(text)?.[1];
      if (url) resolveListening(url);
    }
  };
  const pumped = Promise.all([pump(proc.stdout), pump(proc.stderr)]);
  void proc.exited.then(async (code) => {
    await pumped;
    rejectListening(new Error(`server exited with ${code} before listening:\n${text}`));
  });
  const guard = setTimeout(() => {
    proc.kill("SIGKILL");
    rejectListening(new Error(`server did not start listening within 15 s:\n${text}`));
  }, 15_000);
  const url = await listening.finally(() => clearTimeout(guard));
  const waitForExit = async (killAfterMs = 5000) => {
    let killed = false;
    const timer = setTimeout(() => {
      killed = true;
      proc.kill("SIGKILL");
    }, killAfterMs);
    const exitCode = await proc.exited;
    clearTimeout(timer);
    await pumped;
    return { exitCode, killed };
  };
  return {
    url,
    proc,
    output: () => text,
    logLines: () =>
      text
        .split("\n")
        .filter((line) => line.startsWith("{"))
        .map((line) => JSON.parse(line)),
    stopWith(signal, killAfterMs) {
      proc.kill(signal);
      return waitForExit(killAfterMs);
    },
    waitForExit,
  };
}

/** createToken runs `token create` against a data directory (creating its database first, as `migrate` does) and returns the printed token. */
export function createToken(command: string[], dataDir: string, options: { cwd?: string } = {}): string {
  const migrated = runCli([...command, "migrate", "--data-dir", dataDir], options);
  if (migrated.exitCode !== 0) throw new Error(`migrate failed: ${migrated.stderr}`);
  const result = runCli([...command, "token", "create", "--name", "ops-test", "--data-dir", dataDir], options);
  if (result.exitCode !== 0) throw new Error(`token create failed: ${result.stderr}`);
  return result.stdout.trim();
}

/** api sends one JSON request with a bearer token (and any other headers) and returns status, headers and parsed body. */
export async function api(url: string, token: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null };
}

/** postWithKey sends a POST under an Idempotency-Key (api) and returns its status, whether it was a replay, and its parsed body. */
export async function postWithKey(url: string, token: string, path: string, body: unknown, key: string) {
  const res = await api(url, token, "POST", path, body, { "idempotency-key": key });
  return { status: res.status, replayed: res.headers.get("idempotent-replayed") === "true", body: res.body };
}

/** waitUntil polls a condition until it holds; the test's own timeout bounds it (no timing is asserted). */
export async function waitUntil(condition: () => boolean | Promise<boolean>, what: string, proc?: Subprocess): Promise<void> {
  while (!(await condition())) {
    if (proc && proc.exitCode !== null) throw new Error(`the server exited while waiting for ${what}`);
    await Bun.sleep(10);
  }
}

export interface ReceivedWebhook {
  id: string;
  timestamp: string;
  signature: string;
  body: string;
}

export interface Receiver {
  url: string;
  received: ReceivedWebhook[];
  /** hold makes the receiver keep every following request open until release() */
  hold(): void;
  release(): void;
  stop(): void;
}

/** startReceiver listens on 127.0.0.1 for webhooks, records each one and answers 200 unless holding; stop() fails when a body did not match its event type's schema. */
export function startReceiver(): Receiver {
  const received: ReceivedWebhook[] = [];
  let holding = false;
  let released: Promise<void> = Promise.resolve();
  let release = () => {};
  const payloads = new PayloadCheck();
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      const body = await request.text();
      payloads.check(body);
      received.push({
        id: request.headers.get("webhook-id") ?? "",
        timestamp: request.headers.get("webhook-timestamp") ?? "",
        signature: request.headers.get("webhook-signature") ?? "",
        body,
      });
      if (holding) await released;
      return new Response("ok");
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}/hook`,
    received,
    hold() {
      holding = true;
      released = new Promise((resolve) => (release = resolve));
    },
    release() {
      holding = false;
      release();
    },
    stop() {
      void server.stop(true);
      payloads.assertValid();
    },
  };
}

/**
 * takeBackAfterKeyReset does for a subscription what secrets-key reset asks: rotates its secret (on
 * the server at `rotateAt`), enables it and recovers its failed deliveries of the last hour (at
 * `recoverAt`), then waits for the receiver's first request and returns it verified with the new
 * secret, with the webhook-id it came under.
 */
export async function takeBackAfterKeyReset(servers: { rotateAt: ServerProcess; recoverAt: ServerProcess }, token: string, subscriptionId: string, receiver: Receiver): Promise<{ webhookId: string; payload: unknown }> {
  const path = `/public/v1/webhook-subscriptions/${subscriptionId}`;
  // Enabled before a rotation, it would sign with the reset's secret, which no receiver knows.
  const early = await api(servers.rotateAt.url, token, "POST", `${path}/enable`);
  expect({ status: early.status, body: early.body }).toEqual({
    status: 409,
    body: {
      type: "urn:crm:problem:secret-rotation-required",
      title: "Conflict",
      status: 409,
      detail: `The subscription ${subscriptionId} stays disabled until its secret is rotated: its signing secret was lost with the secrets key (crm secrets-key reset), and the one it has now is known to no receiver. Rotate it (POST /public/v1/webhook-subscriptions/${subscriptionId}/rotate-secret), give the new secret to its receiver, then enable it.`,
    },
  });
  const rotated = await api(servers.rotateAt.url, token, "POST", `${path}/rotate-secret`, {});
  const enabled = await api(servers.rotateAt.url, token, "POST", `${path}/enable`);
  const recovered = await api(servers.recoverAt.url, token, "POST", `${path}/recover`, { since: new Date(Date.now() - 3_600_000).toISOString() });
  expect([rotated.status, enabled.status, recovered.status]).toEqual([200, 200, 202]);
  await waitUntil(() => receiver.received.length > 0, "the recovered delivery", servers.recoverAt.proc);
  const [sent] = receiver.received;
  const payload = new Webhook(rotated.body.data.secret).verify(sent!.body, { "webhook-id": sent!.id, "webhook-timestamp": sent!.timestamp, "webhook-signature": sent!.signature });
  return { webhookId: sent!.id, payload };
}
