import { expect } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp } from "../../server/app.ts";
import { createApiToken } from "../../server/auth/service.ts";
import { DEFAULT_CONFIG, type Config, type LogLevel } from "../../server/config.ts";
import { startServer } from "../../server/server.ts";
import { createLogger } from "../../server/shared/log.ts";
import { testBackend } from "../support/backend.ts";
import { PROBLEM_TYPE, type Harness } from "../support/harness.ts";

export interface CallOptions {
  body?: unknown;
  headers?: Record<string, string>;
}

/** call sends one request to an app in-process and returns status, headers and the parsed body. */
export async function call(app: { handle(request: Request): Promise<Response> }, method: string, path: string, options: CallOptions = {}) {
  const headers: Record<string, string> = {};
  if (options.body !== undefined) headers["content-type"] = "application/json";
  const res = await app.handle(
    new Request(`http://localhost${path}`, {
      method,
      headers: { ...headers, ...options.headers },
      body: options.body === undefined ? undefined : typeof options.body === "string" ? options.body : JSON.stringify(options.body),
    }),
  );
  const text = await res.text();
  let body: any = null;
  if (text) {
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
  }
  return { status: res.status, headers: res.headers, body };
}

/** loggedApp builds a second app over the harness runtime whose log lines (from `level` up) are captured. */
export function loggedApp(h: Harness, level: LogLevel = "debug") {
  const lines: Record<string, any>[] = [];
  const raw: string[] = [];
  const log = createLogger(level, (line) => {
    raw.push(line);
    lines.push(JSON.parse(line));
  });
  const app = createApp({ ...h.rt, log });
  return { app, lines, raw };
}

/** expectProblem asserts a problem+json response whose status member equals the HTTP status. */
export function expectProblem(res: { status: number; headers: Headers; body: any }, status: number, slug?: string) {
  expect(res.status).toBe(status);
  expect(res.headers.get("content-type")).toBe("application/problem+json");
  expect(res.body.status).toBe(status);
  expect(res.body.type).toMatch(PROBLEM_TYPE);
  expect(typeof res.body.title).toBe("string");
  expect(typeof res.body.detail).toBe("string");
  if (slug) expect(res.body.type).toBe(`urn:crm:problem:${slug}`);
}

/** validationProblem is the whole 422 body for the given field errors. */
export function validation(errors: Record<string, string>[], detail: string = "The request has invalid fields.") {
  return { type: "urn:crm:problem:validation", title: "Unprocessable Content", status: 422, detail, errors };
}

export const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
export const CONTACT_ID = /^con_[0-9A-Z]{26}$/;

/** contactCount reads the number of contact rows straight from the database. */
export async function contactCount(h: Harness): Promise<number> {
  return (await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM contacts"))!.n;
}

/** eventTypes lists the outbox events written so far, oldest first. */
export async function eventTypes(h: Harness): Promise<string[]> {
  return (await h.rt.db.all<{ type: string }>("SELECT type FROM events ORDER BY id")).map((r) => r.type);
}

/** listeningServer starts the real server on a free port and a throwaway data directory, with one token; `overrides` change its settings. */
export async function listeningServer(name: string, overrides: Partial<Config> = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), `crm-${name}-`));
  const backend = await testBackend(dataDir);
  const server = await startServer({ ...DEFAULT_CONFIG, port: 0, dataDir, ...backend.config, ...overrides }, createLogger("error", () => {}));
  const { token } = await createApiToken(server.runtime.db, name);
  return {
    server,
    token,
    async stop() {
      await server.stop();
      await backend.drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * onNextCommit has the harness's database run `write` once, at its next commit (with a chunked
 * delete under way, the commit of its first chunk), and returns what gives that write's outcome.
 */
export function onNextCommit<T>(h: Harness, write: () => Promise<T>): () => Promise<T> {
  let started: Promise<T> | null = null;
  h.rt.db.onCommit(() => void (started ??= write()));
  return () => started ?? Promise.reject(new Error("no commit came"));
}

/** contactsNow reads each of the contacts again through the API, in the same order. */
export function contactsNow(h: Harness, contacts: { id: string }[]): Promise<any[]> {
  return Promise.all(contacts.map(async (c) => (await h.json("GET", `/public/v1/contacts/${c.id}`)).body.data));
}

/** updatedContacts lists the contacts the contact.updated events among `events` hold, by id. */
export function updatedContacts(events: { type: string; data: unknown }[]): { id: string }[] {
  return events
    .filter((e) => e.type === "contact.updated")
    .map((e) => e.data as { id: string })
    .sort((a, b) => a.id.localeCompare(b.id));
}

/** eventData lists the outbox events written so far, oldest first, as their type and data. */
export async function eventData(h: Harness): Promise<{ type: string; data: unknown }[]> {
  return (await h.rt.db.all<{ payload: string }>("SELECT payload FROM events ORDER BY id")).map((r) => {
      const { type, data } = JSON.parse(r.payload) as { type: string; data: unknown };
      return { type, data };
    });
}

/** postAccount creates an account through the API, expects 201 and returns it. */
export async function postAccount(h: Harness, body: Record<string, unknown>) {
  const res = await h.json("POST", "/public/v1/accounts", { body });
  expect(res.status).toBe(201);
  return res.body.data;
}
