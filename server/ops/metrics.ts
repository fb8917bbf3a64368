import type { DeliveryOutcome } from "../webhooks/worker.ts";

/** LATENCY_BUCKETS are the histogram bucket bounds in seconds, from a fast API call to a slow webhook receiver. */
const LATENCY_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** DELIVERY_LATENCY_BUCKETS span an event's way to its receiver: sub-second at best, hours through retries. */
const DELIVERY_LATENCY_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200, 36000, 86400];

// Methods outside this list are counted as OTHER so a client cannot grow the label set at will.
const KNOWN_METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);

type Labels = Record<string, string>;

// The label values of the delivery counters, whose series exist from the start at 0: Prometheus
// takes a series' first sample as its baseline, so one that appeared at its first increment hid
// that increment from increase(), and an alert on the first failed delivery after a start never fired.
const ATTEMPT_RESULTS = ["succeeded", "failed", "error"] as const;
const FINAL_DELIVERY_STATUSES = ["succeeded", "failed"] as const;

interface Histogram {
  labels: Labels;
  buckets: number[];
  sum: number;
  count: number;
}

interface Counter {
  labels: Labels;
  value: number;
}

/** Gauge is a value read at scrape time. */
export interface Gauge {
  name: string;
  help: string;
  value: number;
  labels?: Labels;
}

/** labelKey names a series by its label values (a loop: every answered request comes here twice). */
function labelKey(labels: Labels): string {
  let key = "";
  for (const name in labels) key += `${labels[name]}\u0000`;
  return key;
}

function escapeLabel(value: string): string {
  return value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}

function formatLabels(labels: Labels, extra?: [string, string]): string {
  const pairs = Object.entries(labels);
  if (extra) pairs.push(extra);
  return pairs.length === 0 ? "" : `{${pairs.map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(",")}}`;
}

function formatNumber(value: number): string {
  return Number.isFinite(value) ? String(value) : value > 0 ? "+Inf" : value < 0 ? "-Inf" : "NaN";
}

class CounterFamily {
  private readonly series = new Map<string, Counter>();
  constructor(readonly name: string, readonly help: string) {}

  inc(labels: Labels, by = 1): void {
    this.counter(labels).value += by;
  }

  /** counter returns the series of these labels, created at 0. */
  counter(labels: Labels): Counter {
    const key = labelKey(labels);
    let counter = this.series.get(key);
    if (!counter) {
      counter = { labels, value: 0 };
      this.series.set(key, counter);
    }
    return counter;
  }

  render(out: string[]): void {
    out.push(`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`);
    for (const c of this.series.values()) out.push(`${this.name}${formatLabels(c.labels)} ${c.value}`);
  }
}

class HistogramFamily {
  private readonly series = new Map<string, Histogram>();
  constructor(readonly name: string, readonly help: string, private readonly bounds: number[] = LATENCY_BUCKETS) {}

  observe(labels: Labels, seconds: number): void {
    this.observeIn(this.histogram(labels), seconds);
  }

  /** histogram returns the series of these labels, created empty. */
  histogram(labels: Labels): Histogram {
    const key = labelKey(labels);
    let h = this.series.get(key);
    if (!h) {
      h = { labels, buckets: this.bounds.map(() => 0), sum: 0, count: 0 };
      this.series.set(key, h);
    }
    return h;
  }

  /** observeIn records one observation in a series of this family. */
  observeIn(h: Histogram, seconds: number): void {
    // Buckets are stored non-cumulative and summed on render: an observation touches one slot.
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && seconds > bounds[i]!) i++;
    if (i < bounds.length) h.buckets[i]!++;
    h.sum += seconds;
    h.count++;
  }

  render(out: string[]): void {
    out.push(`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`);
    for (const h of this.series.values()) {
      let cumulative = 0;
      this.bounds.forEach((bound, i) => {
        cumulative += h.buckets[i]!;
        out.push(`${this.name}_bucket${formatLabels(h.labels, ["le", String(bound)])} ${cumulative}`);
      });
      out.push(`${this.name}_bucket${formatLabels(h.labels, ["le", "+Inf"])} ${h.count}`);
      out.push(`${this.name}_sum${formatLabels(h.labels)} ${h.sum}`);
      out.push(`${this.name}_count${formatLabels(h.labels)} ${h.count}`);
    }
  }
}

/**
 * Metrics keeps the process's counters and histograms since start (Prometheus handles the reset
 * on restart). HTTP requests are labelled by route pattern, never the raw path, so the number of
 * series stays bounded whatever clients send.
 */
export class Metrics {
  private readonly requests = new CounterFamily("crm_http_requests_total", "HTTP requests answered, by method, route pattern and status, and a rate limit's 429 by the bucket that refused it.");
  /** the series of each method, status, route and bucket seen, by `${method} ${status} ${route} ${bucket}` (routes are patterns and buckets three names: a bounded set) */
  private readonly requestSeries = new Map<string, { count: Counter; duration: Histogram }>();
  private readonly requestDurations = new HistogramFamily("crm_http_request_duration_seconds", "Time from receiving an HTTP request to answering it, by method and route pattern.");
  private readonly attempts = new CounterFamily("crm_webhook_delivery_attempts_total", "Webhook delivery attempts, by result (succeeded: 2xx read to the end; failed: another status; error: no complete response); one not sent for want of a file descriptor here is none.");
  private readonly attemptDurations = new HistogramFamily("crm_webhook_delivery_attempt_duration_seconds", "Time a webhook receiver took to answer one delivery attempt.");
  private readonly deliveries = new CounterFamily(
    "crm_webhook_deliveries_total",
    "Webhook deliveries that reached a final status: succeeded, or failed (retries exhausted, the receiver answered 410, or failed unsent when their subscription was deleted or disabled).",
  );
  private readonly deliveryLatency = new HistogramFamily(
    "crm_webhook_delivery_latency_seconds",
    "Time from an event to its successful delivery, retries included.",
    DELIVERY_LATENCY_BUCKETS,
  );

  constructor() {
    for (const result of ATTEMPT_RESULTS) this.attempts.counter({ result });
    for (const status of FINAL_DELIVERY_STATUSES) this.deliveries.counter({ status });
    this.attemptDurations.histogram({});
    this.deliveryLatency.histogram({});
  }

  /**
   * observeRequest counts one answered HTTP request; route is the matched pattern, or "" when none
   * matched, and `bucket` the rate limit's bucket that refused it (read, write, failed-auth), if one did.
   */
  observeRequest(method: string, route: string, status: number, seconds: number, bucket?: string): void {
    // Every answered request comes here: its two series are found by one lookup.
    const m = KNOWN_METHODS.has(method) ? method : "OTHER";
    const key = `${m} ${status} ${route} ${bucket ?? ""}`;
    let series = this.requestSeries.get(key);
    if (!series) {
      const r = route === "" ? "unmatched" : route;
      // The bucket tells a token over its reads from one over its writes, or from guessed tokens, which status="429" alone lumps together.
      const labels = { method: m, route: r, status: String(status), ...(bucket === undefined ? {} : { bucket }) };
      series = { count: this.requests.counter(labels), duration: this.requestDurations.histogram({ method: m, route: r }) };
      this.requestSeries.set(key, series);
    }
    series.count.value++;
    this.requestDurations.observeIn(series.duration, seconds);
  }

  /** observeDeliveryOutcome counts one finished webhook attempt and, when it ended its delivery, the delivery (an attempt not sent for a fault of this machine reaches no listener: DeliveryLoop). */
  observeDeliveryOutcome(outcome: DeliveryOutcome): void {
    const code = outcome.response_status;
    // A 2xx whose body did not arrive within the timeout is an error, as it is for the delivery.
    const result: (typeof ATTEMPT_RESULTS)[number] = code === null || (outcome.error !== null && code < 300) ? "error" : code >= 200 && code < 300 ? "succeeded" : "failed";
    this.attempts.inc({ result });
    this.attemptDurations.observe({}, outcome.duration_ms / 1000);
    // A delivery is counted once, by the write that ends it while pending: here the attempt's,
    // whatever its trigger (its subscription stopped meanwhile too), else the failing of a stopped
    // subscription's pending deliveries (observePendingDeliveriesFailed). An attempt on a delivery
    // that had already finished (a manual retry) is not another delivery; nor is a late attempt:
    // the claim that took its delivery over counts the delivery.
    if (outcome.late || outcome.previous_status !== "pending" || outcome.status === "pending") return;
    this.deliveries.inc({ status: outcome.status });
    if (outcome.status === "succeeded") this.deliveryLatency.observe({}, outcome.event_age_ms / 1000);
  }

  /** observePendingDeliveriesFailed counts pending deliveries of a deleted or disabled subscription that a write failed unsent (bound: failStoppedDeliveries is given it). */
  readonly observePendingDeliveriesFailed = (count: number): void => {
    if (count > 0) this.deliveries.inc({ status: "failed" }, count);
  };

  /** render writes every series, then the gauges read at scrape time, in the Prometheus text format 0.0.4. */
  render(gauges: Gauge[]): string {
    const out: string[] = [];
    for (const family of [this.requests, this.requestDurations, this.attempts, this.attemptDurations, this.deliveries, this.deliveryLatency]) family.render(out);
    const seen = new Set<string>();
    for (const g of gauges) {
      if (!seen.has(g.name)) {
        seen.add(g.name);
        out.push(`# HELP ${g.name} ${g.help}`, `# TYPE ${g.name} gauge`);
      }
      out.push(`${g.name}${formatLabels(g.labels ?? {})} ${formatNumber(g.value)}`);
    }
    return `${out.join("\n")}\n`;
  }
}
