import { expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { Webhook } from "standardwebhooks";
import { WEBHOOK_EVENT_TYPES } from "../../server/webhooks/model.ts";
import { startReceiver, waitFor, webhookHarness, type WebhookHarness } from "../webhooks/support.ts";

const ROOT = join(import.meta.dir, "..", "..");

/** brokenLinks lists the relative link targets of a Markdown file that leave `root` or name no file. */
function brokenLinks(file: string, root: string): string[] {
  const targets = [...readFileSync(file, "utf8").matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!).filter((target) => !/^(https?:|mailto:|#)/.test(target));
  return targets.filter((target) => {
    const path = resolve(dirname(file), target.split("#")[0]!);
    return relative(root, path).startsWith("..") || !existsSync(path);
  });
}

// A user has the repository, not the workspace it was written in: every document it links to must be in it.
test("the READMEs link only to files inside the repository that exist", () => {
  expect(["README.md", "client/README.md"].flatMap((readme) => brokenLinks(join(ROOT, readme), ROOT).map((target) => `${readme}: ${target}`))).toEqual([]);
});

test("the check catches a link out of the repository and a link to a missing file", () => {
  const root = mkdtempSync(join(tmpdir(), "crm-readme-"));
  try {
    writeFileSync(join(root, "README.md"), "[the design](../shared/DESIGN.md), [here](README.md), [gone](docs/gone.md), [site](https://example.com), [top](#top)\n");
    expect(brokenLinks(join(root, "README.md"), root)).toEqual(["../shared/DESIGN.md", "docs/gone.md"]);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

// The README's receiver examples, run against real deliveries of every event type: a receiver copies them.

/** receiverExamples are the README's receiver (a whole program) and the handling it shows in place of that receiver's (a handler body). */
function receiverExamples(): { program: string; handling: string } {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const blockAfter = (marker: string) => /```ts\n([\s\S]*?)```/.exec(readme.slice(readme.indexOf(marker)))![1]!;
  return { program: blockAfter("A receiver in TypeScript"), handling: blockAfter("So: drop an `event_id`") };
}

const EVERY_EVENT_TYPE = [...WEBHOOK_EVENT_TYPES];

/** READS_UNLIMITED lifts the read rate limit: the tests poll the deliveries until each event has arrived. */
const READS_UNLIMITED = { rateReadBurst: 1_000_000, rateReadPerSecond: 1_000_000 };

/** exampleDir is a scratch folder for a README example, which imports the packages the repository has. */
function exampleDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "crm-readme-receiver-"));
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
  return dir;
}

/**
 * sendEveryEventType makes each kind of event reach the subscriptions `watched` (subscribed to every
 * type), one at a time, each waited for until all their deliveries succeeded: two accounts and two
 * contacts, one of each kept and one deleted, a test ping, a delivery of another subscription
 * exhausted, and another subscription disabled by a 410. It returns the ids the events are about.
 */
async function sendEveryEventType(h: WebhookHarness, watched: string[]) {
  let expected = 0;
  const settled = async (what: string, more = 1) => {
    expected += more;
    await waitFor(async () => {
      const lists = await Promise.all(watched.map((id) => h.deliveries(`subscription_id=${id}&per_page=100`)));
      return lists.every((list) => list.length === expected && list.every((d: { status: string }) => d.status === "succeeded"));
    }, what, 20_000);
  };
  const write = async (method: string, path: string, body?: unknown) => (await h.json(method, path, body === undefined ? {} : { body })).body?.data;
  const kept = await write("POST", "/public/v1/accounts", { name: "Analytical Engines" });
  await settled("account.created");
  await write("PATCH", `/public/v1/accounts/${kept.id}`, { domain: "engines.example" });
  await settled("account.updated");
  const gone = await write("POST", "/public/v1/accounts", { name: "Difference Engines" });
  await settled("account.created");
  const ada = await write("POST", "/public/v1/contacts", { first_name: "Ada", email: "ada@example.com" });
  await settled("contact.created");
  await write("PATCH", `/public/v1/contacts/${ada.id}`, { last_name: "Lovelace" });
  await settled("contact.updated");
  const charles = await write("POST", "/public/v1/contacts", { first_name: "Charles" });
  await settled("contact.created");
  for (const id of watched) await write("POST", `/public/v1/webhook-subscriptions/${id}/test`);
  await settled("webhook.ping");
  await write("DELETE", `/public/v1/contacts/${charles.id}`);
  await settled("contact.deleted");
  await write("DELETE", `/public/v1/accounts/${gone.id}`);
  await settled("account.deleted");
  const failing = startReceiver("/failing");
  try {
    failing.respond(() => new Response("busy", { status: 503 }));
    const exhausted = await h.subscribe(failing.url, ["webhook.ping"]);
    await write("POST", `/public/v1/webhook-subscriptions/${exhausted.id}/test`);
    await settled("delivery.exhausted");
    failing.respond(() => new Response("gone", { status: 410 }));
    const disabled = await h.subscribe(failing.url, ["webhook.ping"]);
    await write("POST", `/public/v1/webhook-subscriptions/${disabled.id}/test`);
    await settled("subscription.disabled");
    return { kept: kept.id, gone: gone.id, ada: ada.id, charles: charles.id, exhausted: exhausted.id, disabled: disabled.id };
  } finally {
    await failing.stop();
  }
}

test("the README's receiver, run as written (its port alone changed), logs every event type once with the record or subscription it is about", async () => {
  const { program } = receiverExamples();
  expect(program.match(/port: 8080/g)).toEqual(["port: 8080"]);
  const dir = exampleDir();
  const h = await webhookHarness(READS_UNLIMITED);
  const lines: string[] = [];
  let child: Subprocess<"ignore", "pipe", "pipe"> | undefined;
  let reading: Promise<void> | undefined;
  try {
    const probe = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
    const port = probe.port;
    probe.stop(true);
    const url = `http://127.0.0.1:${port}/hooks`;
    const subscription = await h.subscribe(url, EVERY_EVENT_TYPE);
    writeFileSync(join(dir, "receiver.ts"), program.replace("port: 8080", "port: Number(process.env.PORT)"));
    child = Bun.spawn([process.execPath, join(dir, "receiver.ts")], { env: { ...process.env, PORT: String(port), CRM_WEBHOOK_SECRET: subscription.secret }, stdout: "pipe", stderr: "pipe" });
    const output = child.stdout;
    reading = (async () => {
      for await (const chunk of output.pipeThrough(new TextDecoderStream())) lines.push(chunk);
    })();
    await waitFor(async () => (await fetch(url, { method: "POST", body: "{}" }).catch(() => null))?.status === 401, "the receiver to answer an unsigned request with 401");
    const ids = await sendEveryEventType(h, [subscription.id]);
    // A delivery sent again (a manual retry) is a repeat: handled once. A last ping then shows every line before it has come.
    const [first] = await h.deliveries(`subscription_id=${subscription.id}&event=contact.created&per_page=100`);
    const retried = await h.json("POST", `/public/v1/webhook-deliveries/${first.id}/retry`);
    expect([retried.status, retried.body.data.attempts, retried.body.data.last_response_status]).toEqual([200, 2, 204]);
    await h.json("POST", `/public/v1/webhook-subscriptions/${subscription.id}/test`);
    const shown = () => lines.join("").split("\n").filter(Boolean);
    await waitFor(() => shown().length >= 12, "the receiver's lines");
    expect(shown()).toEqual([
      `account.created ${ids.kept}`,
      `account.updated ${ids.kept}`,
      `account.created ${ids.gone}`,
      `contact.created ${ids.ada}`,
      `contact.updated ${ids.ada}`,
      `contact.created ${ids.charles}`,
      `webhook.ping ${subscription.id}`,
      `contact.deleted ${ids.charles}`,
      `account.deleted ${ids.gone}`,
      `delivery.exhausted ${ids.exhausted}`,
      `subscription.disabled ${ids.disabled}`,
      `webhook.ping ${subscription.id}`,
    ]);
  } finally {
    child?.kill();
    await reading;
    await h.shutdown();
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);

test("the README's handling by version, in its receiver, stores accounts and contacts apart, keeps deletes as tombstones and stores nothing for the other types, each contact event sent by two subscriptions", async () => {
  const { handling } = receiverExamples();
  const dir = exampleDir();
  const h = await webhookHarness(READS_UNLIMITED);
  try {
    writeFileSync(join(dir, "handle.ts"), `export async function handle(request: Request, body: string, webhook: any, db: any): Promise<Response> {\n${handling}}\n`);
    const { handle } = await import(join(dir, "handle.ts"));
    // The store the example calls `db`, in memory: each record's version, its data while it lives, and each event handled.
    const seen = new Set<string>();
    const records = new Map<string, { version: number; data?: unknown; deleted?: true }>();
    const db = {
      seen: async (eventId: string) => seen.has(eventId),
      markSeen: async (eventId: string) => void seen.add(eventId),
      version: async (kind: string, id: string) => records.get(`${kind} ${id}`)?.version ?? 0,
      save: async (kind: string, data: { id: string; version: number }) => void records.set(`${kind} ${data.id}`, { version: data.version, data }),
      remove: async (kind: string, id: string, version: number) => void records.set(`${kind} ${id}`, { version, deleted: true }),
    };
    const secrets = new Map<string, string>();
    const receiver = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      // An example that throws answers 500, so the test fails on the deliveries it waits for, not beside them.
      fetch: async (request) => {
        try {
          return await handle(request, await request.text(), new Webhook(secrets.get(new URL(request.url).pathname)!), db);
        } catch (error) {
          return new Response(String(error), { status: 500 });
        }
      },
    });
    try {
      const every = await h.subscribe(`http://127.0.0.1:${receiver.port}/every`, EVERY_EVENT_TYPE);
      secrets.set("/every", every.secret);
      // A second subscription to the same receiver: each contact event comes twice, with one event_id.
      const copies = await h.subscribe(`http://127.0.0.1:${receiver.port}/copies`, ["contact.created", "contact.updated", "contact.deleted"]);
      secrets.set("/copies", copies.secret);
      const ids = await sendEveryEventType(h, [every.id]);
      await waitFor(async () => (await h.deliveries(`subscription_id=${copies.id}&status=succeeded&per_page=100`)).length === 4, "the copies");
      const read = async (path: string) => (await h.json("GET", path)).body.data;
      expect({ stored: Object.fromEntries(records), handled: seen.size }).toEqual({
        stored: {
          [`account ${ids.kept}`]: { version: 2, data: await read(`/public/v1/accounts/${ids.kept}`) },
          [`account ${ids.gone}`]: { version: 2, deleted: true },
          [`contact ${ids.ada}`]: { version: 2, data: await read(`/public/v1/contacts/${ids.ada}`) },
          [`contact ${ids.charles}`]: { version: 2, deleted: true },
        },
        // every event once: 3 account and 3 contact events, 2 deletes, the ping and the two reports
        handled: 11,
      });
    } finally {
      receiver.stop(true);
    }
  } finally {
    await h.shutdown();
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);
