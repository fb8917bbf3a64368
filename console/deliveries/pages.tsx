/** @jsxImportSource preact */
import type { DeliveryDetail, Subscription } from "../../server/webhooks/model.ts";
import type { WebhookEvent } from "../../server/webhooks/service.ts";
import { DELIVERY_STATUSES, WEBHOOK_EVENT_TYPES } from "../../server/webhooks/model.ts";
import type { ConsoleSession, DeliveriesView, DeliveryFilters, SubscriptionNames } from "../model.ts";
import { DeliveriesLive, type DeliveriesLiveProps } from "../pages/deliveries-live.tsx";
import { EventDeliveries } from "../contacts/pages.tsx";
import { fieldMarks, FieldWithReason, RefusalSummary, type Refusal } from "../pages/forms.tsx";
import { renderPage } from "../pages/layout.tsx";
import { SearchBox } from "../search/pages.tsx";
import type { SubscriptionHealth } from "../subscriptions/health.ts";
import { HealthPanel } from "../subscriptions/health-pages.tsx";
import { CsrfField, formatDuration, holdPuttingOff, HttpStatus, Island, isolated, NoticeBox, receiverUrl, StatusBadge, SubscriptionLabel, Time, relativeTime, WaitsForHold, WaitsForResume, type NoticeData } from "../pages/parts.tsx";
import { MakerLink } from "../pages/made-by.tsx";
import type { ChangeMaker, MakerNames } from "../../server/shared/made-by.ts";

/** LIVE_FILTERS are the filters the live table keeps when it refreshes itself. */
const LIVE_FILTERS = ["status", "event", "subscription_id", "event_id", "contact_id", "request_id", "since", "until"] as const;

/** filterQuery turns the filters that are set, and an older page's position, into the query string of the page's plain address. */
function filterQuery(filters: DeliveryFilters): string {
  const params = new URLSearchParams();
  for (const key of [...LIVE_FILTERS, "before"] as const) if (filters[key]) params.set(key, filters[key]!);
  const text = params.toString();
  return text ? `?${text}` : "";
}

/** setFilters are the filters that are set, and an older page's position: what the page's address holds, plain or sealed. */
export function setFilters(filters: DeliveryFilters): Record<string, string> {
  return Object.fromEntries([...LIVE_FILTERS, "before" as const].flatMap((key) => (filters[key] ? [[key, filters[key]!]] : [])));
}

/** plainDeliveriesAddress is the start page's address with the filters, and an older page's position, in the clear. */
export function plainDeliveriesAddress(filters: DeliveryFilters): string {
  return `/console/${filterQuery(filters)}`;
}

/** FilterSelect is one filter of the deliveries page: "any" or one of the options ([value, label]). */
function FilterSelect(props: { name: string; label: string; any: string; selected: string | undefined; options: [string, string][]; refusal: Refusal | null | undefined }) {
  const grow = props.name === "subscription_id" ? "grow" : undefined;
  return (
    <FieldWithReason refusal={props.refusal} name={props.name} className={grow}>
      <label class={grow}>
        {props.label}
        <select name={props.name} {...fieldMarks(props.refusal, props.name)}>
          <option value="">{props.any}</option>
          {props.options.map(([value, label]) => (
            <option value={value} selected={props.selected === value}>
              {label}
            </option>
          ))}
        </select>
      </label>
    </FieldWithReason>
  );
}

/**
 * fieldStep is the step of a time field showing `value`: a field steps by the minute unless told
 * otherwise, and a browser refuses to send one whose value has seconds or milliseconds off that step.
 */
function fieldStep(value: string | undefined): string | undefined {
  return value?.length === 23 ? "0.001" : value?.length === 19 ? "1" : undefined;
}

/** FilterInput is a typed filter of the deliveries page: an id, or a time (UTC). */
function FilterInput(props: { name: keyof DeliveryFilters; label: string; value: string | undefined; time?: boolean; placeholder?: string; maxLength?: number; refusal: Refusal | null | undefined }) {
  const marks = fieldMarks(props.refusal, props.name);
  return (
    <FieldWithReason refusal={props.refusal} name={props.name}>
      <label>
        {props.label}
        {props.time ? (
          <input type="datetime-local" name={props.name} value={props.value ?? ""} step={fieldStep(props.value)} {...marks} />
        ) : (
          <input type="text" name={props.name} value={props.value ?? ""} placeholder={props.placeholder} maxLength={props.maxLength ?? 64} spellcheck={false} {...marks} />
        )}
      </label>
    </FieldWithReason>
  );
}

/**
 * deliveriesPage renders the start page: each subscription's health, then the deliveries (the
 * latest, live, or an older page), with filters. `filters` are those the deliveries are filtered
 * by; the form shows `typed` instead when they differ (refused filters, as sent, to be corrected).
 */
export function deliveriesPage(props: {
  session: ConsoleSession;
  view: DeliveriesView;
  filters: DeliveryFilters;
  typed?: DeliveryFilters;
  subscriptions: Subscription[];
  health: SubscriptionHealth[];
  disableAfterHours: number;
  limit: number;
  refusal?: Refusal | null;
  notice?: NoticeData | null;
  /** the start page's address with filters and a position (the route's: plain, or sealed for a request id) */
  addressOf: (filters: DeliveryFilters) => string;
}): string {
  const { view } = props;
  const applied = { ...props.filters, before: undefined };
  const latest = props.addressOf(applied);
  const filters = props.typed ?? props.filters;
  const live: DeliveriesLiveProps = { initial: view, query: latest.slice("/console/".length), limit: props.limit };
  const older = view.next ? props.addressOf({ ...applied, before: view.next }) : null;
  return renderPage({
    title: "Deliveries",
    session: props.session,
    section: "deliveries",
    islands: view.older ? [] : ["deliveries"],
    children: (
      <>
        <div class="page-head">
          <h1>Deliveries</h1>
          <p class="lead">Are webhooks arriving? Each receiver's last 24 hours and 7 days, then the deliveries themselves, newest first; the latest {props.limit} refresh themselves every few seconds.</p>
          <SearchBox session={props.session} />
        </div>
        <HealthPanel health={props.health} disableAfterHours={props.disableAfterHours} />
        <form class="filters card" method="post" action="/console/">
          <CsrfField token={props.session.csrfToken} />
          <FilterSelect name="status" label="Status" any="Any status" selected={filters.status} options={DELIVERY_STATUSES.map((s) => [s, s])} refusal={props.refusal} />
          <FilterSelect name="event" label="Event" any="Any event" selected={filters.event} options={WEBHOOK_EVENT_TYPES.map((e) => [e, e])} refusal={props.refusal} />
          <FilterSelect
            name="subscription_id"
            label="Subscription"
            any="Any subscription"
            selected={filters.subscription_id}
            options={props.subscriptions.map((s) => [s.id, s.description ? `${isolated(s.description)} — ${receiverUrl(s.target_url)}` : receiverUrl(s.target_url)])}
            refusal={props.refusal}
          />
          <FilterInput name="event_id" label="Event id" value={filters.event_id} placeholder="evt_…" refusal={props.refusal} />
          <FilterInput name="contact_id" label="Contact id" value={filters.contact_id} placeholder="con_…" refusal={props.refusal} />
          <FilterInput name="request_id" label="Request id" value={filters.request_id} placeholder="X-Request-Id" maxLength={100} refusal={props.refusal} />
          <FilterInput name="since" label="From (UTC)" value={filters.since} time refusal={props.refusal} />
          <FilterInput name="until" label="Until (UTC)" value={filters.until} time refusal={props.refusal} />
          <div class="filter-actions">
            <button type="submit" class="button">
              Filter
            </button>
            {(Object.keys(setFilters(filters)).length > 0 || view.older) && (
              <a class="button ghost" href="/console/">
                Clear
              </a>
            )}
          </div>
        </form>
        <RefusalSummary refusal={props.refusal} fields={LIVE_FILTERS} />
        <NoticeBox notice={props.notice} />
        {view.older ? (
          <DeliveriesLive {...live} />
        ) : (
          <Island name="deliveries" props={live}>
            <DeliveriesLive {...live} />
          </Island>
        )}
        {(view.older || older) && (
          <nav class="pager" aria-label="Deliveries pages">
            {view.older && (
              <a class="button ghost" href={latest}>
                ← Latest
              </a>
            )}
            {older && (
              <a class="button ghost" href={older} rel="next" id="older-deliveries">
                Older deliveries →
              </a>
            )}
          </nav>
        )}
      </>
    ),
  });
}

/**
 * RequestFact is the "Request" of a delivery's or an event's facts: the X-Request-Id of the request
 * that made the event, linking the deliveries of that request (`deliveries`: the Request id filter's
 * address, sealed), or why there is none.
 */
function RequestFact({ requestId, deliveries }: { requestId: string | null; deliveries: string | null }) {
  return (
    <>
      <dt>Request</dt>
      <dd id="request-id">
        {requestId && deliveries ? (
          <>
            <code>{requestId}</code> <a href={deliveries}>deliveries of this request</a> <span class="muted">(the X-Request-Id of the request that made the event)</span>
          </>
        ) : (
          <span class="muted">none: the service made this event itself, or a command did, or it is older than request ids</span>
        )}
      </dd>
    </>
  );
}

/**
 * eventPage renders one event: its body, what it is about, the request and the API token that made
 * it, and every delivery made of it with its outcome. `requestDeliveries` is the address of the
 * deliveries of that request, sealed as the Request id filter's are.
 */
export function eventPage(props: { session: ConsoleSession; event: WebhookEvent; subject: { href: string; label: string } | null; names: MakerNames; subscriptions: SubscriptionNames; requestDeliveries: string | null }): string {
  const e = props.event;
  return renderPage({
    title: `Event ${e.id}`,
    session: props.session,
    section: "deliveries",
    children: (
      <>
        <div class="page-head">
          <p class="crumbs">
            <a href="/console/">Deliveries</a> / <span>{e.id}</span>
          </p>
          <h1>
            <code>{e.type}</code> event
          </h1>
        </div>
        <section class="card">
          <dl class="facts grid">
            <dt>Event id</dt>
            <dd>
              <code>{e.id}</code> <span class="muted">(event_id in every body)</span>
            </dd>
            <dt>Created</dt>
            <dd>
              <Time value={e.created_at} />
            </dd>
            <dt>About</dt>
            <dd>
              {props.subject ? (
                <a href={props.subject.href}>
                  <span class="chosen">{props.subject.label}</span>
                </a>
              ) : (
                <span class="muted">no contact or account</span>
              )}
            </dd>
            <RequestFact requestId={e.request_id} deliveries={props.requestDeliveries} />
            <dt>Made by</dt>
            <dd>
              <MakerLink madeBy={e.made_by} names={props.names} />
            </dd>
          </dl>
        </section>
        <EventDeliveries id="event-deliveries" deliveries={e.deliveries} subscriptions={props.subscriptions} />
        <section class="card">
          <h2>Payload</h2>
          <Payload payload={e.payload} erasedAt={e.payload_erased_at} erasedBy={{ madeBy: e.payload_erased_by, names: props.names }} />
        </section>
      </>
    ),
  });
}

/** Payload shows an event's body as sent, or, once erased, when it was erased instead of the record. */
function Payload(props: { payload: unknown; erasedAt: string | null; erasedBy?: { madeBy: ChangeMaker | null; names: MakerNames } }) {
  if (props.erasedAt === null) return <pre class="code">{JSON.stringify(props.payload, null, 2)}</pre>;
  // An erasure recorded before migration 0052 has no maker: said only where there is one.
  const by = props.erasedBy?.madeBy && (
    <>
      {" "}
      by <MakerLink madeBy={props.erasedBy.madeBy} names={props.erasedBy.names} />
    </>
  );
  return (
    <p class="payload-erased">
      Erased <Time value={props.erasedAt} />
      {by}, after its contact or account was deleted: nothing of the record is kept, shown or sent any more.
    </p>
  );
}

// The signature proves nothing to a reader of this page and is long: its start is enough to compare.
function shortenHeader(name: string, value: string): string {
  return name.toLowerCase() === "webhook-signature" && value.length > 20 ? `${value.slice(0, 16)}…` : value;
}

/** HeaderTable lists an attempt's headers; null: an erasure dropped them (the request's, whose signature would confirm a guessed payload). */
function HeaderTable({ headers, caption }: { headers: Record<string, string> | null; caption: string }) {
  const entries = Object.entries(headers ?? {});
  return (
    <div>
      <h4>{caption}</h4>
      {headers === null ? (
        <p class="muted headers-erased">erased with the payload</p>
      ) : entries.length === 0 ? (
        <p class="muted">none</p>
      ) : (
        <table class="kv">
          <tbody>
            {entries.map(([name, value]) => (
              <tr>
                <th scope="row">{name}</th>
                <td>
                  <code>{shortenHeader(name, value)}</code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

/**
 * ResponseBody shows what an attempt kept of the receiver's answer. A compressed one (sent despite
 * the service asking for `Accept-Encoding: identity`) is kept as sent and never unpacked, so its
 * bytes would read as noise: the page says what it is instead.
 */
function ResponseBody({ body, headers }: { body: string; headers: Record<string, string> }) {
  const encoding = headers["content-encoding"]?.trim();
  if (body === "") return <pre class="body">(empty)</pre>;
  if (encoding && encoding.toLowerCase() !== "identity") {
    return <p class="muted packed-body">Compressed by the receiver ({encoding}): kept as sent, not unpacked.</p>;
  }
  return <pre class="body">{body}</pre>;
}

/**
 * deliveryPage renders one delivery: what was sent, every attempt with its answer, and "Retry now" while its subscription exists.
 * `requestDeliveries` is the address of the deliveries of the request that made its event, sealed as the Request id filter's are.
 */
export function deliveryPage(props: { session: ConsoleSession; delivery: DeliveryDetail; subscription: Subscription | null; requestDeliveries: string | null; notice?: NoticeData | null }): string {
  const d = props.delivery;
  const paused = props.subscription?.status === "paused";
  const heldUntil = holdPuttingOff(d, props.subscription);
  return renderPage({
    title: `Delivery ${d.id}`,
    session: props.session,
    section: "deliveries",
    children: (
      <>
        <div class="page-head">
          <p class="crumbs">
            <a href="/console/">Deliveries</a> / <span>{d.id}</span>
          </p>
          <h1 class="with-badge">
            <span>
              <code>{d.event_type}</code> delivery
            </span>
            <StatusBadge status={d.status} />
          </h1>
        </div>
        <NoticeBox notice={props.notice} />
        <section class="card">
          <dl class="facts grid">
            <dt>Delivery id</dt>
            <dd>
              <code>{d.id}</code> <span class="muted">(the receiver's webhook-id)</span>
            </dd>
            <dt>Event</dt>
            <dd>
              <code>{d.event_type}</code> <a href={`/console/events/${d.event_id}`}>
                <code>{d.event_id}</code>
              </a>
            </dd>
            <RequestFact requestId={d.request_id} deliveries={props.requestDeliveries} />
            <dt>Subscription</dt>
            <dd>
              {props.subscription ? (
                <>
                  <a href={`/console/subscriptions/${d.subscription_id}`}>
                    <SubscriptionLabel description={props.subscription.description} url={d.target_url} />
                  </a>{" "}
                  <a href={`/console/?subscription_id=${d.subscription_id}`}>its deliveries</a>
                </>
              ) : (
                <>
                  <span class="url">{receiverUrl(d.target_url)}</span> <span class="muted">(subscription deleted)</span>
                </>
              )}
            </dd>
            <dt>Created</dt>
            <dd>
              <Time value={d.created_at} />
            </dd>
            <dt>Attempts</dt>
            <dd>{d.attempts}</dd>
            <dt>Last response</dt>
            <dd>
              <HttpStatus status={d.last_response_status} />
              {d.last_error && <span class="error-text"> {d.last_error}</span>}
            </dd>
            <dt>Next retry</dt>
            <dd id="next-retry">
              {paused && d.status === "pending" ? (
                <WaitsForResume since={props.subscription!.paused_at} />
              ) : heldUntil !== null ? (
                <WaitsForHold until={heldUntil} />
              ) : d.next_attempt_at ? (
                <>
                  <Time value={d.next_attempt_at} /> <span class="muted">({relativeTime(d.next_attempt_at, d.updated_at)} after the last change)</span>
                </>
              ) : (
                <span class="muted">none</span>
              )}
            </dd>
          </dl>
          {d.payload_erased_at ? (
            // The API refuses a retry of an erased event: a button would only say so after being pressed.
            <p class="hint retry-erased">No Retry now: what it sent was erased after its contact or account was deleted, so nothing of it can be sent any more.</p>
          ) : paused ? (
            // The API refuses a retry while the subscription is paused: a button would only say so after being pressed.
            <p class="hint retry-paused">
              No Retry now: its subscription is paused{d.status === "pending" ? ", and this delivery waits for it" : ""}. Resume it on the <a href="/console/subscriptions">Subscriptions page</a>{" "}
              {d.status === "pending" ? "to send it." : "first."}
            </p>
          ) : props.subscription ? (
            <form method="post" action={`/console/deliveries/${d.id}/retry`} class="actions">
              <CsrfField token={props.session.csrfToken} />
              <button type="submit" class="button primary">
                Retry now
              </button>
              <span class="hint">Sends the same event again at once, with the same webhook-id.</span>
            </form>
          ) : (
            // The delivery loop refuses every attempt of it: a button would only say so after being pressed.
            <p class="hint retry-gone">No Retry now: its subscription was deleted, so nothing can be sent for this delivery any more.</p>
          )}
        </section>
        <section class="card">
          <h2>Payload</h2>
          <Payload payload={d.payload} erasedAt={d.payload_erased_at} />
        </section>
        <section class="card">
          <h2>Attempts</h2>
          {d.attempt_history.length === 0 && <p class="muted">No attempt yet.</p>}
          {d.attempt_history.length > 0 && d.attempt_history[0]!.attempt > 1 && (
            <p class="muted">The newest {d.attempt_history.length} attempts are shown; attempts 1 to {d.attempt_history[0]!.attempt - 1} are not.</p>
          )}
          {[...d.attempt_history].reverse().map((a) => (
            <article class="attempt">
              <header>
                <h3>Attempt {a.attempt}</h3>
                <span class="tag">{a.trigger}</span>
                <Time value={a.started_at} />
                <span class="muted">{formatDuration(a.duration_ms)}</span>
                {a.error ? <span class="error-text">{a.error}</span> : <HttpStatus status={a.response_status} />}
              </header>
              <div class="attempt-grid">
                <HeaderTable caption="Request headers" headers={a.request_headers} />
                <HeaderTable caption="Response headers" headers={a.response_headers} />
              </div>
              {a.response_body !== null && (
                <>
                  <h4>Response body</h4>
                  <ResponseBody body={a.response_body} headers={a.response_headers} />
                </>
              )}
            </article>
          ))}
        </section>
      </>
    ),
  });
}
