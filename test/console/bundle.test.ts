import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ISLANDS } from "../../console/bundle.ts";
import { buildConsoleBundles } from "../../scripts/build-console.ts";
import { createHarness } from "../support/harness.ts";
import { addOperator, ConsoleClient } from "./support.ts";

const dir = mkdtempSync(join(tmpdir(), "crm-console-build-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("island bundles", () => {
  test("the build script writes one browser bundle per island, the same files the app serves from source", async () => {
    const file = join(dir, "islands.json");
    expect(await buildConsoleBundles(file)).toEqual(ISLANDS.map((name) => `${name}.js`));
    const built = JSON.parse(readFileSync(file, "utf8")) as Record<string, string>;
    const h = await createHarness();
    try {
      for (const [name, js] of Object.entries(built)) {
        const res = await h.app.handle(new Request(`http://localhost/console/assets/${name}`));
        expect(res.status).toBe(200);
        expect(res.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
        expect(await res.text()).toBe(js);
      }
      expect((await h.app.handle(new Request("http://localhost/console/assets/server.js"))).status).toBe(404);
    } finally {
      await h.close();
    }
  });

  test("an asset asked for again with If-None-Match naming its ETag (weakly, in a list, or *) is 304 without a body, keeping its ETag, Cache-Control and security headers", async () => {
    const h = await createHarness();
    try {
      const ask = (path: string, ifNoneMatch?: string, method = "GET") =>
        h.app.handle(new Request(`http://localhost${path}`, { method, headers: ifNoneMatch === undefined ? {} : { "if-none-match": ifNoneMatch } }));
      const shown = async (res: Response) => {
        const { date, "x-request-id": _, "content-length": length, ...headers } = Object.fromEntries(res.headers);
        return { status: res.status, headers, body: await res.text() };
      };
      for (const path of ["/console/assets/console.css", ...ISLANDS.map((name) => `/console/assets/${name}.js`)]) {
        const first = await shown(await ask(path));
        const etag = first.headers.etag!;
        expect(etag).toMatch(/^"[0-9a-z]+"$/);
        const { "content-type": _, ...unchanged } = first.headers;
        const notModified = { status: 304, headers: unchanged, body: "" };
        for (const condition of [etag, `W/${etag}`, `"other", ${etag}`, ` , W/"x",${etag} `, "*"]) expect(await shown(await ask(path, condition))).toEqual(notModified);
        expect(await shown(await ask(path, etag, "HEAD"))).toEqual(notModified);
        // Another tag, a tag without its quotes, or a value that is no tag at all: the file, whole.
        for (const condition of ['"other"', etag.slice(1, -1), "W/", ""]) expect(await shown(await ask(path, condition))).toEqual(first);
      }
    } finally {
      await h.close();
    }
  });

  test("bundles hold browser code only: no server modules, SQL or secrets", async () => {
    const built = JSON.parse(readFileSync(join(dir, "islands.json"), "utf8")) as Record<string, string>;
    for (const js of Object.values(built)) {
      expect(js.length).toBeGreaterThan(1000);
      for (const serverOnly of ["bun:sqlite", "CREATE TABLE", "SELECT ", "password", "elysia", "whsec_"]) expect(js.includes(serverOnly)).toBe(false);
    }
  });

  test("the deliveries page loads only the deliveries island and marks where it mounts", async () => {
    const h = await createHarness();
    try {
      await addOperator(h.rt.db);
      const client = new ConsoleClient((r) => h.app.handle(r));
      await client.signIn();
      const page = await client.get("/console/");
      const scripts = [...page.text.matchAll(/<script type="module" src="([^"]+)"/g)].map((m) => m[1]);
      expect(scripts).toEqual(["/console/assets/deliveries.js"]);
      expect(page.text).toContain('<div data-island="deliveries" data-props="island-deliveries-props">');
    } finally {
      await h.close();
    }
  });
});
