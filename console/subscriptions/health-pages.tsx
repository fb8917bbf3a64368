/** @jsxImportSource preact */
import type { MakerNames } from "../../server/shared/made-by.ts";
import type { SubscriptionStats, WindowStats } from "../../server/webhooks/model.ts";
import { WAITING_COUNTED } from "../../server/webhooks/model.ts";
import type { ConsoleSession } from "../model.ts";
import { ChartLegend, DeliveriesChart } from "../pages/charts.tsx";
import { renderPage } from "../pages/layout.tsx";
import { MakerLink } from "../pages/made-by.tsx";
import { DataTable, FailingNote, formatDuration, HeldNote, isolated, PausedNote, receiverUrl, RowSubject, SecretNote, StatusBadge, SubscriptionLabel, Time } from "../pages/parts.tsx";
import type { FailureReason, SubscriptionHealth } from "./health.ts";
import type { SubscriptionMakers } from "./service.ts";

/** latencyText says a window's response times: "attempt time p50 120 ms · p95 800 ms", or that nothing was attempted. */
function latencyText(times: SubscriptionHealth["latency"]["last_24h"]): string {
  return times ? `attempt time p50 ${formatDuration(times.p50)} · p95 ${formatDuration(times.p95)}` : "no attempts";
}

// Without it, p50/p95 beside a deliveries chart read as how long events took to be delivered.
const ATTEMPT_TIME = "How long the receiver took to answer each HTTP attempt (median and 95th percentile of the attempts), not the time from an event to its delivery";

/** Latency shows a window's response times when they were read (the start page reads those of 24 hours only). */
function Latency({ times }: { times: SubscriptionHealth["latency"]["last_7d"] }) {
  return times === undefined ? null : (
    <span class="latency" title={ATTEMPT_TIME}>
      {latencyText(times)}
    </span>
  );
}

/**
 * HealthCard is one subscription's health: deliveries per hour (24 h) and per day (7 days), and response times.
 * On the start page the subscription heads its card (h3) and each chart is an h4 under it; on the
 * subscription's own page the page's heading names it and the charts are h3.
 */
function HealthCard({ health, large, disableAfterHours }: { health: SubscriptionHealth; large: boolean; disableAfterHours: number }) {
  const s = health.subscription;
  const size = large ? { width: 720, height: 180 } : { width: 300, height: 84 };
  const ChartHeading = large ? "h3" : "h4";
  return (
    <article class={`health-card${large ? " large" : ""}`} data-subscription-id={s.id}>
      {!large && (
        <header>
          <h3>
            <a href={`/console/subscriptions/${s.id}`}>
              <SubscriptionLabel description={s.description} url={s.target_url} />
            </a>
          </h3>
          <StatusBadge status={s.status} />
        </header>
      )}
      {!large && <FailingNote subscription={s} disableAfterHours={disableAfterHours} />}
      {!large && <HeldNote subscription={s} />}
      {!large && <PausedNote subscription={s} />}
      <div class="health-charts">
        <div>
          <ChartHeading>
            Last 24 hours <Latency times={health.latency.last_24h} />
          </ChartHeading>
          <DeliveriesChart id={`chart-${s.id}-24h`} title="Deliveries per hour, last 24 hours" bars={health.hours} unit="hour" size={size} table={large} />
        </div>
        <div>
          <ChartHeading>
            Last 7 days <Latency times={health.latency.last_7d} />
          </ChartHeading>
          <DeliveriesChart id={`chart-${s.id}-7d`} title="Deliveries per day, last 7 days" bars={health.days} unit="day" size={size} table={large} />
        </div>
      </div>
    </article>
  );
}

/** HealthPanel is the start page's health at a glance: one card per subscription, in the order given (worstFirst). */
export function HealthPanel({ health, disableAfterHours }: { health: SubscriptionHealth[]; disableAfterHours: number }) {
  if (health.length === 0) return null;
  return (
    <section class="card health" aria-labelledby="health-title" aria-describedby="health-note" id="health">
      <div class="card-head">
        <h2 id="health-title">Health at a glance</h2>
        <ChartLegend />
        <p class="hint" id="health-note">
          Failing subscriptions first, then those with failed deliveries in the last 24 hours, then the rest. Attempt time is how long the receiver took to answer one HTTP attempt, not how long an event took to be delivered.
        </p>
      </div>
      <div class="health-grid">
        {health.map((h) => (
          <HealthCard health={h} large={false} disableAfterHours={disableAfterHours} />
        ))}
      </div>
    </section>
  );
}

/** AttemptsRow is one window of the API's stats: attempts, their outcome and their response times. */
function AttemptsRow({ label, window }: { label: string; window: WindowStats }) {
  const times = window.latency_ms;
  return (
    <tr>
      <th scope="row" data-label="Window">
        {label}
      </th>
      <td data-label="Attempts" class="num">
        {window.attempts}
      </td>
      <td data-label="Succeeded" class="num">
        {window.succeeded}
      </td>
      <td data-label="Failed" class="num">
        {window.failed}
      </td>
      <td data-label="Success rate" class="num">
        {window.success_rate === null ? "–" : `${Math.round(window.success_rate * 10000) / 100}%`}
      </td>
      {(["p50", "p90", "p99"] as const).map((p) => (
        <td data-label={p} class="num">
          {times ? formatDuration(times[p]) : "–"}
        </td>
      ))}
    </tr>
  );
}

/**
 * waitingFor says what the deliveries due now that no attempt is under way for (the stats' deliveries_waiting) wait for, by the subscription's
 * state: a hold its receiver asked for (heldUntil, shown with its end under the status) is waited out, not a free slot.
 */
function waitingFor(stats: SubscriptionStats, maxRate: number | null, heldUntil: string | null): string {
  if (stats.status === "paused") return "waiting for the resume";
  if (stats.status === "disabled") return "not sent while it is disabled";
  if (heldUntil !== null) return "waiting for its receiver's hold to end";
  return maxRate === null ? "waiting for a free slot" : `waiting for a free slot or its pace of ${maxRate} a second`;
}

/**
 * Attempts shows a subscription's attempts as the API's stats count them (every attempt, p50/p90/p99),
 * beside the charts, which count deliveries: a partner quoting the API and an operator reading
 * the console otherwise disagree, by as many times as each delivery was tried, with no unit to tell why.
 * Above them, the deliveries due and waiting, which tell a receiver slow to get its backlog from one that fails.
 */
function Attempts({ stats, maxRate, heldUntil }: { stats: SubscriptionStats; maxRate: number | null; heldUntil: string | null }) {
  return (
    <DataTable
      id="attempts"
      columns={["Window", { label: "Attempts", className: "num" }, { label: "Succeeded", className: "num" }, { label: "Failed", className: "num" }, { label: "Success rate", className: "num" }, { label: "p50", className: "num" }, { label: "p90", className: "num" }, { label: "p99", className: "num" }]}
      empty={null}
      head={
        <div class="card-head">
          <h2>Attempts</h2>
          <p class="hint" id="attempts-note">
            Every attempt counts, retries and Retry now included, as GET /public/v1/webhook-subscriptions/{stats.subscription_id}/stats reports them. The charts and the failures count deliveries, each once, by how it stands now.
          </p>
          <p id="deliveries-waiting">
            Pending deliveries: {stats.deliveries_waiting >= WAITING_COUNTED ? `${WAITING_COUNTED.toLocaleString("en-US")} or more` : stats.deliveries_waiting} due, {waitingFor(stats, maxRate, heldUntil)}.
          </p>
        </div>
      }
    >
      <AttemptsRow label="Last 24 hours" window={stats.last_24h} />
      <AttemptsRow label="Last 7 days" window={stats.last_7d} />
    </DataTable>
  );
}

/** subscriptionPage renders one subscription: its charts, larger, its attempts as the API counts them, and its recent failures grouped by reason. */
export function subscriptionPage(props: {
  session: ConsoleSession;
  health: SubscriptionHealth;
  failures: FailureReason[] | null;
  rotationId: string | null;
  disableAfterHours: number;
  stats: SubscriptionStats;
  makers: SubscriptionMakers;
  names: MakerNames;
}): string {
  const s = props.health.subscription;
  return renderPage({
    title: isolated(s.description ?? receiverUrl(s.target_url)),
    session: props.session,
    section: "subscriptions",
    children: (
      <>
        <div class="page-head">
          <p class="crumbs">
            <a href="/console/subscriptions">Subscriptions</a> / <span>{s.id}</span>
          </p>
          <h1 class="with-badge">
            <span>{s.description ?? "Subscription"}</span>
            <StatusBadge status={s.status} />
          </h1>
          <p class="url">{receiverUrl(s.target_url)}</p>
          <p class="muted" id="made-by">
            Made by <MakerLink madeBy={props.makers.madeBy} names={props.names} />
          </p>
          <FailingNote subscription={s} disableAfterHours={props.disableAfterHours} />
          <HeldNote subscription={s} />
          <PausedNote subscription={s} />
          {s.status === "paused" && (
            <p class="muted" id="paused-by">
              Paused by <MakerLink madeBy={props.makers.pausedBy} names={props.names} />
            </p>
          )}
          {s.status === "disabled" && (
            <p class="muted" id="disabled-by">
              Disabled at <Time value={s.disabled_at} /> by <MakerLink madeBy={props.makers.disabledBy} names={props.names} />: {s.disabled_reason}
            </p>
          )}
          <p class="muted" id="changed-by">
            Last changed at <Time value={s.updated_at} /> by <MakerLink madeBy={props.makers.updatedBy} names={props.names} />
          </p>
          <p class="muted">
            <SecretNote subscription={s} />
          </p>
        </div>
        <section class="card health" id="health">
          <div class="card-head">
            <h2>Deliveries</h2>
            <ChartLegend />
          </div>
          <HealthCard health={props.health} large={true} disableAfterHours={props.disableAfterHours} />
          <p class="actions">
            <a class="button" href={`/console/?subscription_id=${s.id}`}>
              Its deliveries
            </a>
            <a class="button ghost" href={`/console/subscriptions/${s.id}/recover`}>
              Recover failed deliveries
            </a>
            <a class="button ghost" href={props.rotationId ? `/console/rotations/${props.rotationId}` : `/console/rotations/new?from=${s.id}`}>
              {props.rotationId ? "Resume rotation" : "Rotate"}
            </a>
          </p>
        </section>
        <Attempts stats={props.stats} maxRate={s.max_rate} heldUntil={s.held_until} />
        <DataTable
          id="failures"
          columns={["Reason", { label: "Deliveries", className: "num" }, "Last seen (UTC)"]}
          empty={
            props.failures === null
              ? "Not grouped this time: the service is holding as many slow reads as --slow-list-lane allows. Reload the page in a moment."
              : props.failures.length === 0
                ? "No failing deliveries in the last 7 days."
                : null
          }
          head={
            <div class="card-head">
              <h2>Failures of the last 7 days, by reason</h2>
            </div>
          }
        >
          {(props.failures ?? []).map((f) => (
            <tr>
              <td data-label="Reason">
                <code>{f.reason}</code>
              </td>
              <td data-label="Deliveries" class="num">
                {f.deliveries}
              </td>
              <td data-label="Last seen">
                <a href={`/console/deliveries/${f.latest_delivery_id}`}>
                  <Time value={f.latest_at} zone={false} />
                  <RowSubject>latest delivery failing with {f.reason}</RowSubject>
                </a>
              </td>
            </tr>
          ))}
        </DataTable>
      </>
    ),
  });
}
