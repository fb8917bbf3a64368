import { describe, expect, test } from "bun:test";
import type { Page } from "playwright-core";
import { recentFailures } from "../../console/subscriptions/health.ts";
import { LATENCY_BOUNDS_MS, addAttemptStats } from "../../server/webhooks/stats.ts";
import { startReceiver, waitFor, type Receiver } from "../webhooks/support.ts";
import { browserFile, cspViolations, seedDeliveries, shootAtBothWidths, type ConsoleServer, type SeededDelivery } from "./support.ts";

// One server and one browser for the file: a subscription with a seeded week of deliveries, and one without any.
let server: ConsoleServer;
let page: Page;
let problems: string[];
let receiver: Receiver;
let busy: { id: string; target_url: string };
let quiet: { id: string };
const seeded: SeededDelivery[] = [];

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const now = Date.now();
const hourOf = (at: number) => at - (at % HOUR);
const dayOf = (at: number) => at - (at % DAY);
const SLOW = 60_000;

browserFile(async (file) => {
  ({ server, receiver, page, problems } = file);
  busy = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: receiver.url, description: "Warehouse", events: ["contact.deleted"] })).data;
  quiet = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: `${receiver.url}/quiet`, description: "Quiet one", events: ["contact.deleted"] })).data;
  const at = (ago: number) => now - ago;
  const many = (n: number, d: Omit<SeededDelivery, "at">, when: number) => Array.from({ length: n }, () => ({ ...d, at: when }));
  seeded.push(
    ...many(4, { status: "succeeded" }, at(1000)),
    ...many(3, { status: "succeeded" }, at(2 * HOUR)),
    ...many(1, { status: "failed", response_status: 500 }, at(2 * HOUR)),
    ...many(1, { status: "pending", error: "connect ECONNREFUSED 10.0.0.1:443" }, at(5 * HOUR)),
    ...many(1, { status: "pending" }, at(5 * HOUR)),
    ...many(5, { status: "succeeded" }, at(3 * DAY)),
    ...many(2, { status: "failed", response_status: 503 }, at(3 * DAY)),
    ...many(1, { status: "failed", error: "timed out after 2000 ms" }, at(3 * DAY + HOUR)),
  );
  await seedDeliveries(server.runtime.db, busy, seeded);
  // Response times: 20 quick answers and 2 slow ones in the last hour.
  await server.runtime.db.write((tx) => addAttemptStats(tx, [
    ...Array.from({ length: 20 }, () => ({ subscription_id: busy.id, started_at: now - 1000, duration_ms: 100, succeeded: true })),
    ...Array.from({ length: 2 }, () => ({ subscription_id: busy.id, started_at: now - 1000, duration_ms: 3000, succeeded: false })),
  ]));
});

type Counts = { succeeded: number; failed: number; pending: number };

/** expectedBars sums the seeded deliveries per bar start (hour or day) from `from` on. */
function expectedBars(bucket: (at: number) => number, from: number): Map<string, Counts> {
  const bars = new Map<string, Counts>();
  for (const d of seeded) {
    if (d.at < from) continue;
    const key = new Date(bucket(d.at)).toISOString();
    const bar = bars.get(key) ?? { succeeded: 0, failed: 0, pending: 0 };
    bar[d.status]++;
    bars.set(key, bar);
  }
  return bars;
}

/** readChart reads a chart's scale and, for every bar with deliveries, its counts and the drawn height of each status. */
async function readChart(selector: string) {
  return page.locator(selector).evaluate((figure) => {
    const svg = figure.querySelector("svg")!;
    const bars = [...svg.querySelectorAll("g.chart-bar")].map((g) => ({
      from: g.getAttribute("data-from")!,
      counts: { succeeded: Number(g.getAttribute("data-succeeded")), failed: Number(g.getAttribute("data-failed")), pending: Number(g.getAttribute("data-pending")) },
      heights: Object.fromEntries([...g.querySelectorAll("rect")].map((r) => [r.getAttribute("data-status")!, Number(r.getAttribute("height"))])),
    }));
    return { top: Number(svg.getAttribute("data-top")), plotHeight: Number(svg.getAttribute("data-plot-height")), count: bars.length, bars, summary: svg.querySelector("title")!.textContent, alternative: figure.querySelector("figcaption")!.textContent };
  });
}

/** niceTop is the chart's scale for a tallest bar: 1, 2 or 5 times a power of ten, at least as high. */
const niceTop = (max: number) => [1, 2, 5, 10, 20, 50, 100].find((m) => m >= max)!;

/** expectChart checks a chart against the seeded deliveries: which bars have deliveries, their counts, and each drawn height. */
async function expectChart(selector: string, expected: Map<string, Counts>, count: number) {
  const chart = await readChart(selector);
  const tallest = Math.max(0, ...[...expected.values()].map((c) => c.succeeded + c.failed + c.pending));
  expect(chart.count).toBe(count);
  expect(chart.top).toBe(niceTop(tallest));
  const drawn = chart.bars.filter((b) => b.counts.succeeded + b.counts.failed + b.counts.pending > 0);
  expect(new Map(drawn.map((b) => [b.from, b.counts]))).toEqual(expected);
  for (const bar of drawn) {
    const heights = Object.fromEntries(Object.entries(bar.counts).filter(([, n]) => n > 0).map(([status, n]) => [status, Math.round((n / chart.top) * chart.plotHeight * 100) / 100]));
    expect({ from: bar.from, heights: bar.heights }).toEqual({ from: bar.from, heights });
  }
  return chart;
}

const ATTEMPT_TIME = "How long the receiver took to answer each HTTP attempt (median and 95th percentile of the attempts), not the time from an event to its delivery";
const latency = (ms: number) => `${Math.round(LATENCY_BOUNDS_MS.find((bound) => bound >= ms)!)} ms`;

describe("health at a glance", () => {
  test("the start page draws each subscription's deliveries per hour (24) and per day (7), stacked by status, with the p50 and p95 of attempt time", async () => {
    await page.goto(`${server.url}/console/`);
    const hours = expectedBars(hourOf, hourOf(now) - 23 * HOUR);
    const days = expectedBars(dayOf, dayOf(now) - 6 * DAY);
    const hourly = await expectChart(`#chart-${busy.id}-24h`, hours, 24);
    await expectChart(`#chart-${busy.id}-7d`, days, 7);
    // The text alternative says the same numbers.
    expect([hourly.summary, hourly.alternative]).toEqual(["Deliveries per hour, last 24 hours: 10 deliveries: 7 succeeded, 1 failed, 2 pending.", "Deliveries per hour, last 24 hours: 10 deliveries: 7 succeeded, 1 failed, 2 pending."]);
    // Named as what they are: an HTTP attempt's time, not an event's time to delivery.
    expect(await page.locator(`article[data-subscription-id="${busy.id}"] .latency`).first().textContent()).toBe(`attempt time p50 ${latency(100)} · p95 ${latency(3000)}`);
    expect(await page.locator(`article[data-subscription-id="${busy.id}"] .latency`).first().getAttribute("title")).toBe(ATTEMPT_TIME);
    expect(await page.textContent("#health-note")).toBe(
      "Failing subscriptions first, then those with failed deliveries in the last 24 hours, then the rest. Attempt time is how long the receiver took to answer one HTTP attempt, not how long an event took to be delivered.",
    );
    // A subscription without deliveries gets empty charts, not an error.
    await expectChart(`#chart-${quiet.id}-24h`, new Map(), 24);
    expect(await page.locator(`article[data-subscription-id="${quiet.id}"] .latency`).first().textContent()).toBe("no attempts");
    expect(await cspViolations(page)).toEqual([]);
    expect(await shootAtBothWidths(page, "health")).toBe(390);
    expect(problems).toEqual([]);
  }, SLOW);

  test("a subscription's page has the same charts, larger, and its failures of the week grouped by reason, most frequent first", async () => {
    await page.goto(`${server.url}/console/subscriptions`);
    await Promise.all([page.waitForURL(`${server.url}/console/subscriptions/${busy.id}`), page.click(`tr[data-subscription-id="${busy.id}"] a:has-text('Health')`)]);
    const chart = await expectChart(`#chart-${busy.id}-24h`, expectedBars(hourOf, hourOf(now) - 23 * HOUR), 24);
    expect(chart.plotHeight).toBeGreaterThan(100);
    // Here the text alternative adds a table of every bar, shown on request.
    const rows = await page.locator(`#chart-${busy.id}-24h table tbody tr`).evaluateAll((trs) => trs.map((tr) => [...tr.children].map((cell) => cell.textContent)));
    expect(rows.length).toBe(24);
    const lastHour = new Date(hourOf(now)).toISOString();
    expect(rows.at(-1)).toEqual([lastHour.slice(11, 16), ...Object.values(expectedBars(hourOf, hourOf(now)).get(lastHour)!).map(String)]);
    await expectChart(`#chart-${busy.id}-7d`, expectedBars(dayOf, dayOf(now) - 6 * DAY), 7);
    expect(await page.locator(".health-card .latency").allTextContents()).toEqual([`attempt time p50 ${latency(100)} · p95 ${latency(3000)}`, `attempt time p50 ${latency(100)} · p95 ${latency(3000)}`]);
    const reasons = await page.locator("#failures tbody tr").evaluateAll((rows) => rows.map((row) => [...row.querySelectorAll("td")].slice(0, 2).map((td) => td.textContent!.trim())));
    expect(reasons).toEqual([
      ["HTTP 503", "2"],
      ["HTTP 500", "1"],
      ["connect ECONNREFUSED 10.0.0.1:443", "1"],
      ["timed out after 2000 ms", "1"],
    ]);
    expect(await cspViolations(page)).toEqual([]);
    expect(await shootAtBothWidths(page, "subscription-health")).toBe(390);
    expect(problems).toEqual([]);
  }, SLOW);

  test("the console's counts say they count deliveries, and a subscription's page shows its attempts as the API's stats count them", async () => {
    await page.goto(`${server.url}/console/subscriptions`);
    expect(await page.locator("#subscriptions thead th").allTextContents()).toContain("Deliveries, last 24 hours");
    await page.goto(`${server.url}/console/subscriptions/${busy.id}`);
    const stats = (await server.api("GET", `/public/v1/webhook-subscriptions/${busy.id}/stats`)).data;
    expect(stats.last_24h).toMatchObject({ attempts: 22, succeeded: 20, failed: 2, success_rate: 0.9091 });
    const shown = (window: { latency_ms: { p50: number; p90: number; p99: number } }) => [window.latency_ms.p50, window.latency_ms.p90, window.latency_ms.p99].map((ms) => `${Math.round(ms)} ms`);
    expect(await page.locator("#attempts tbody tr").evaluateAll((rows) => rows.map((row) => [...row.querySelectorAll("th, td")].map((cell) => cell.textContent!.trim())))).toEqual([
      ["Last 24 hours", "22", "20", "2", "90.91%", ...shown(stats.last_24h)],
      ["Last 7 days", "22", "20", "2", "90.91%", ...shown(stats.last_7d)],
    ]);
    expect(await page.textContent("#attempts-note")).toBe(
      `Every attempt counts, retries and Retry now included, as GET /public/v1/webhook-subscriptions/${busy.id}/stats reports them. The charts and the failures count deliveries, each once, by how it stands now.`,
    );
    // Its pending deliveries are due tomorrow: none waits yet.
    expect(stats.deliveries_waiting).toBe(0);
    expect(await page.textContent("#deliveries-waiting")).toBe("Pending deliveries: 0 due, waiting for a free slot.");
  }, SLOW);

  test("a subscription's page shows the deliveries due and waiting as the API's stats count them, and what they wait for", async () => {
    const create = async (body: object) => (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/waiting", events: ["contact.updated"], ...body })).data;
    const paused = await create({ description: "Paused with a backlog" });
    await server.api("POST", `/public/v1/webhook-subscriptions/${paused.id}/pause`);
    const ids = await seedDeliveries(server.runtime.db, paused, [{ at: now - HOUR, status: "pending" }, { at: now - HOUR, status: "pending" }, { at: now - HOUR, status: "pending" }]);
    // Two of the three are due now; the third's retry is due tomorrow, as seeded.
    for (const id of ids.slice(0, 2)) await server.runtime.db.run("UPDATE webhook_deliveries SET next_attempt_at = ? WHERE id = ?", [now - 1000, id]);
    const paced = await create({ description: "Paced", max_rate: 5 });
    // Held by its receiver before its deliveries fall due, so that no claim sends them first.
    const held = await create({ description: "Held by its receiver" });
    await server.runtime.db.run("UPDATE webhook_subscriptions SET held_until = ? WHERE id = ?", [Date.now() + HOUR, held.id]);
    const heldIds = await seedDeliveries(server.runtime.db, held, [{ at: now - HOUR, status: "pending" }]);
    await server.runtime.db.run("UPDATE webhook_deliveries SET next_attempt_at = ? WHERE id = ?", [now - 1000, heldIds[0]!]);
    const shown = async (id: string) => {
      await page.goto(`${server.url}/console/subscriptions/${id}`);
      return { api: (await server.api("GET", `/public/v1/webhook-subscriptions/${id}/stats`)).data.deliveries_waiting, page: await page.textContent("#deliveries-waiting") };
    };
    expect(await shown(paused.id)).toEqual({ api: 2, page: "Pending deliveries: 2 due, waiting for the resume." });
    expect(await shown(paced.id)).toEqual({ api: 0, page: "Pending deliveries: 0 due, waiting for a free slot or its pace of 5 a second." });
    expect(await shown(held.id)).toEqual({ api: 1, page: "Pending deliveries: 1 due, waiting for its receiver's hold to end." });
    expect(problems).toEqual([]);
  }, SLOW);

  test("failure reasons tied on count and time are listed latest delivery first, in one order on both backends", async () => {
    // One commit can create several events, so deliveries to one subscription share a millisecond.
    const tied = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: "http://127.0.0.1:9/ties", events: ["contact.updated"] })).data;
    const at = Date.now() - 60_000;
    const seeded: SeededDelivery[] = [{ at, status: "failed", response_status: 500 }, { at, status: "failed", response_status: 404 }, { at, status: "failed", error: "tie zeta" }, { at, status: "failed", error: "tie alpha" }];
    const ids = await seedDeliveries(server.runtime.db, tied, seeded);
    expect((await recentFailures(server.runtime.db, tied.id, "test"))!.map((failure): [string, string | undefined] => [failure.reason, failure.latest_delivery_id])).toEqual([
      ["tie alpha", ids[3]],
      ["tie zeta", ids[2]],
      ["HTTP 404", ids[1]],
      ["HTTP 500", ids[0]],
    ]);
  });

  test("an unknown subscription's page is a 404 page", async () => {
    const res = await page.goto(`${server.url}/console/subscriptions/sub_01J00000000000000000000000`);
    expect(res!.status()).toBe(404);
    expect(await page.textContent("h1")).toBe("Not found");
    expect(problems).toEqual(["Failed to load resource: the server responded with a status of 404 (Not Found)"]);
    problems.length = 0;
  }, SLOW);
});

describe("a subscription whose every attempt fails", () => {
  test("the start page lists failing subscriptions first, then those with failed deliveries, then the rest, each group as before (newest first)", async () => {
    const failing = startReceiver();
    failing.respond(() => new Response("down", { status: 503 }));
    const gone = startReceiver();
    gone.respond(() => new Response("gone", { status: 410 }));
    try {
      const down = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: failing.url, description: "Down partner", events: ["contact.deleted"] })).data;
      const removed = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: gone.url, description: "Gone partner", events: ["contact.deleted"] })).data;
      // The newest, so listed first until now.
      const fine = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: `${receiver.url}/fine`, description: "Fine partner", events: ["contact.deleted"] })).data;
      await server.api("POST", `/public/v1/webhook-subscriptions/${down.id}/test`, {});
      await server.api("POST", `/public/v1/webhook-subscriptions/${removed.id}/test`, {});
      await waitFor(async () => (await server.api("GET", `/public/v1/webhook-subscriptions/${down.id}/stats`)).data.failing_since !== null, "a failed attempt", 20_000);
      await waitFor(async () => (await server.api("GET", `/public/v1/webhook-subscriptions/${removed.id}`)).data.status === "disabled", "the 410 disabling it", 20_000);
      await page.goto(`${server.url}/console/`);
      const cards = await page.locator(".health-card").evaluateAll((articles) => articles.map((a) => a.getAttribute("data-subscription-id")));
      // busy has a failed delivery in its last 24 hours, quiet has none.
      expect(cards.filter((id) => [down.id, removed.id, fine.id, busy.id, quiet.id].includes(id))).toEqual([removed.id, down.id, busy.id, fine.id, quiet.id]);
      for (const s of [down, removed, fine]) await server.api("DELETE", `/public/v1/webhook-subscriptions/${s.id}`);
    } finally {
      await failing.stop();
      await gone.stop();
    }
  }, SLOW);

  test("the start page's card, the subscriptions row and its page say since when, and when it is disabled if that goes on", async () => {
    const failing = startReceiver();
    failing.respond(() => new Response("down", { status: 503 }));
    try {
      const partner = (await server.api("POST", "/public/v1/webhook-subscriptions", { target_url: failing.url, description: "Failing partner", events: ["contact.deleted"] })).data;
      await server.api("POST", `/public/v1/webhook-subscriptions/${partner.id}/test`, {});
      let since: string | null = null;
      await waitFor(async () => (since = (await server.api("GET", `/public/v1/webhook-subscriptions/${partner.id}/stats`)).data.failing_since) !== null, "a failed attempt", 20_000);
      const shown = (iso: string) => `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
      const until = new Date(Date.parse(since!) + server.runtime.config.disableFailingAfterHours * HOUR).toISOString();
      const sentence = `Failing since ${shown(since!)}; disabled automatically at ${shown(until)} if every attempt goes on failing.`;
      await page.goto(`${server.url}/console/`);
      expect(await page.textContent(`.health-card[data-subscription-id="${partner.id}"] .failing-note`)).toBe(sentence);
      expect(await page.locator(`.health-card[data-subscription-id="${busy.id}"] .failing-note`).count()).toBe(0);
      await page.goto(`${server.url}/console/subscriptions`);
      expect(await page.textContent(`tr[data-subscription-id="${partner.id}"] .failing-note`)).toBe(sentence);
      await page.goto(`${server.url}/console/subscriptions/${partner.id}`);
      expect(await page.textContent(".page-head .failing-note")).toBe(sentence);
      await server.api("DELETE", `/public/v1/webhook-subscriptions/${partner.id}`);
    } finally {
      await failing.stop();
    }
  }, SLOW);
});
