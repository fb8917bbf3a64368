/** @jsxImportSource preact */
import { useSignal } from "@preact/signals";
import { useEffect, useLayoutEffect, useRef } from "preact/hooks";
import type { DeliveriesView, DeliveryRowView } from "../model.ts";
import { DataTable, HttpStatus, relativeTime, RowSubject, StatusBadge, SubscriptionLabel, Time, WaitsForHold, WaitsForResume } from "./parts.tsx";

/** REFRESH_MS is how often the deliveries page asks for the latest deliveries. */
const REFRESH_MS = 3000;

export interface DeliveriesLiveProps {
  initial: DeliveriesView;
  /** the page's filter query string ("" or "?status=failed..."), reused for every refresh */
  query: string;
  limit: number;
}

// "static" until the island runs: without JavaScript the table is as fresh as the page.
// "expired": the page's sealed address (a request id's filter) opens no more, its hour past.
type LiveState = "static" | "live" | "offline" | "signed-out" | "expired";

/** DeliveriesLive is the deliveries table; in the browser it refreshes itself every few seconds until paused. */
export function DeliveriesLive({ initial, query, limit }: DeliveriesLiveProps) {
  const view = useSignal(initial);
  const state = useSignal<LiveState>("static");
  const paused = useSignal(false);
  const count = useRef<HTMLParagraphElement>(null);
  // Set by a refresh that drops the row holding keyboard focus: the render that drops it hands focus to
  // the count, or focus would fall back to the top of the page and a screen reader lose its place.
  const focusDropped = useRef(false);
  const refreshNow = useRef<(() => void) | null>(null);
  useEffect(() => {
    if (initial.older) return;
    state.value = "live";
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stopped = false;
    const refresh = async () => {
      if (!document.hidden && !paused.peek()) {
        try {
          const res = await fetch(`/console/api/deliveries${query}`, { headers: { accept: "application/json" } });
          if (res.status === 401 || res.status === 410) {
            state.value = res.status === 401 ? "signed-out" : "expired";
            return;
          }
          if (!res.ok) throw new Error(`status ${res.status}`);
          const next = (await res.json()) as DeliveriesView;
          // Paused while the answer was on its way: the table stays as it was when paused.
          if (!paused.peek()) {
            focusDropped.current = focusLeaves(next);
            view.value = next;
          }
          state.value = "live";
        } catch {
          state.value = "offline";
        }
      }
      if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
    };
    timer = setTimeout(refresh, REFRESH_MS);
    // Resumed: the table catches up at once rather than at the next tick.
    refreshNow.current = () => {
      clearTimeout(timer);
      void refresh();
    };
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, []);
  useLayoutEffect(() => {
    if (!focusDropped.current) return;
    focusDropped.current = false;
    count.current?.focus();
  });
  const current = view.value;
  return (
    <DataTable
      id="deliveries"
      columns={["Time (UTC)", "Event", "Subscription", "Status", { label: "Attempts", className: "num" }, "Response", "Next retry"]}
      empty={current.data.length === 0 ? "Deliveries appear here when contacts change and subscriptions want those events." : null}
      head={
        <div class="card-head">
          <div>
            <h2>{current.older ? "Older deliveries" : "Latest deliveries"}</h2>
            <p class="count" id="deliveries-count" tabIndex={-1} ref={count}>
              {current.total === 0
                ? "No deliveries match."
                : current.older
                  ? `Showing ${current.data.length} older of ${current.total}, newest first.`
                  : current.total > current.data.length
                    ? `Showing the latest ${current.data.length} of ${current.total}, newest first.`
                    : `Showing all ${current.total}, newest first.`}
            </p>
          </div>
          {!current.older && <LiveIndicator state={state.value} paused={paused.value} onPause={() => {
                paused.value = !paused.value;
                if (!paused.value) refreshNow.current?.();
              }} refreshedAt={current.refreshed_at} limit={limit} />}
        </div>
      }
    >
      {current.data.map((row) => (
        <DeliveryRow key={row.id} row={row} now={current.refreshed_at} />
      ))}
    </DataTable>
  );
}

/** focusLeaves says whether keyboard focus is in a row of the table that `next` no longer has. */
function focusLeaves(next: DeliveriesView): boolean {
  const row = document.activeElement?.closest("#deliveries tr[data-delivery-id]");
  return !!row && !next.data.some((delivery) => delivery.id === row.getAttribute("data-delivery-id"));
}

function DeliveryRow({ row, now }: { row: DeliveryRowView; now: string }) {
  return (
    <tr data-delivery-id={row.id}>
      <td data-label="Time">
        <a href={`/console/deliveries/${row.id}`} title={`Delivery ${row.id}`}>
          <Time value={row.created_at} zone={false} />
          <RowSubject>delivery {row.id}</RowSubject>
        </a>
      </td>
      <td data-label="Event">
        <span class="event-links">
          <a href={`/console/events/${row.event_id}`} title={`Event ${row.event_id}`}>
            <code>{row.event_type}</code>
            <RowSubject>event {row.event_id}</RowSubject>
          </a>
          {row.subject_id?.startsWith("con_") && (
            <a class="subject" href={`/console/contacts/${row.subject_id}`} title={`Contact ${row.subject_id}`}>
              contact<RowSubject>{row.subject_id}</RowSubject>
            </a>
          )}
        </span>
      </td>
      <td data-label="Subscription">
        <SubscriptionLabel description={row.subscription_description} url={row.target_url} />
      </td>
      <td data-label="Status">
        <StatusBadge status={row.status} />
      </td>
      <td data-label="Attempts" class="num">
        {row.attempts}
      </td>
      <td data-label="Response">
        <HttpStatus status={row.last_response_status} />
      </td>
      <td data-label="Next retry">
        {row.paused_since || row.held_until || row.next_attempt_at ? (
          // To the delivery's own next retry, with its Retry now (or why it has none).
          <a href={`/console/deliveries/${row.id}#next-retry`}>
            {row.paused_since ? (
              <WaitsForResume since={row.paused_since} />
            ) : row.held_until ? (
              <WaitsForHold until={row.held_until} />
            ) : (
              <span title={row.next_attempt_at!}>{relativeTime(row.next_attempt_at!, now)}</span>
            )}
            <RowSubject>next retry of delivery {row.id}</RowSubject>
          </a>
        ) : (
          <span class="muted">–</span>
        )}
      </td>
    </tr>
  );
}

/**
 * LiveIndicator says whether the table is live. Only the state word is a live region: a screen reader
 * speaks it when it changes (Live, Paused, Reconnecting, Signed out, Stopped), not the time of every refresh.
 */
function LiveIndicator({ state, paused, onPause, refreshedAt, limit }: { state: LiveState; paused: boolean; onPause: () => void; refreshedAt: string; limit: number }) {
  const stopped = state === "signed-out" || state === "expired";
  return (
    <div class="live-bar">
      <p class={`live live-${stopped ? "stopped" : paused ? "paused" : state}`} title={`Latest ${limit}, refreshed every ${REFRESH_MS / 1000} s`}>
        <span class="live-dot" aria-hidden="true" />
        <span role="status">
          {state === "expired" ? (
            "Stopped: these filters have expired; filter again to resume updates."
          ) : stopped ? (
            <>
              Signed out: <a href="/console/login">sign in again</a> to resume updates.
            </>
          ) : paused ? (
            "Paused"
          ) : state === "live" ? (
            "Live"
          ) : state === "offline" ? (
            "Reconnecting"
          ) : (
            "Reload to refresh"
          )}
        </span>
        {!stopped && <span>· updated {refreshedAt.slice(11, 19)} UTC</span>}
      </p>
      {/* Only once the island runs: without JavaScript there is nothing to pause. */}
      {state !== "static" && !stopped && (
        <button type="button" class="button small ghost" aria-pressed={paused ? "true" : "false"} onClick={onPause}>
          Pause updates
        </button>
      )}
    </div>
  );
}
