import type { Operator } from "../server/operators/model.ts";
import { t } from "elysia";
import { SEALED_MAX_LENGTH } from "./addresses.ts";

// The NUL character is refused when a field is read (field and fields, console/shell.ts), so the
// form page names the field instead of the post being refused here, before the form's route runs.
const FormValue = t.String({ maxLength: 10_000 });

/** FormBody is any HTML form post: each field has one value, or several when repeated (checkboxes). */
export const FormBody = t.Record(t.String(), t.Union([FormValue, t.Array(FormValue, { maxItems: 20 })], { error: "must be text of at most 10000 characters, given at most 20 times" }));
export type FormBody = typeof FormBody.static;

/** DeliveryFilterQuery holds the filters of the deliveries page; values are checked by the service. */
export const DeliveryFilterQuery = t.Object(
  {
    status: t.Optional(t.String({ maxLength: 20 })),
    event: t.Optional(t.String({ maxLength: 40 })),
    subscription_id: t.Optional(t.String({ maxLength: 64 })),
    event_id: t.Optional(t.String({ maxLength: 64 })),
    contact_id: t.Optional(t.String({ maxLength: 64 })),
    request_id: t.Optional(t.String({ maxLength: 200 })),
    since: t.Optional(t.String({ maxLength: 40 })),
    until: t.Optional(t.String({ maxLength: 40 })),
    /** where the previous page stopped: the next page lists older deliveries */
    before: t.Optional(t.String({ maxLength: 100 })),
    /** the filters the form sent, sealed (console/addresses.ts): the page's own, not a filter */
    s: t.Optional(t.String({ maxLength: SEALED_MAX_LENGTH })),
  },
  // Unknown filters are refused by the service with a message naming them, not ignored.
  { additionalProperties: true },
);
export type DeliveryFilters = typeof DeliveryFilterQuery.static;

const nullableString = t.Union([t.String(), t.Null()]);
const nullableInteger = t.Union([t.Integer(), t.Null()]);

/** DeliveryRowView is one row of the deliveries table, as rendered on the server and by the live island. */
export const DeliveryRowView = t.Object({
  id: t.String(),
  created_at: t.String(),
  event_type: t.String(),
  event_id: t.String(),
  /** the contact or account the event is about, when it names one */
  subject_id: nullableString,
  subscription_id: t.String(),
  subscription_description: nullableString,
  target_url: t.String(),
  status: t.String(),
  attempts: t.Integer(),
  last_response_status: nullableInteger,
  next_attempt_at: nullableString,
  /** since when its subscription is paused, for a pending delivery that waits for its Resume (whatever next_attempt_at says); else null */
  paused_since: nullableString,
  /** until when its receiver holds its subscription, for a pending delivery whose next attempt the hold puts off (holdPuttingOff); else null */
  held_until: nullableString,
});
export type DeliveryRowView = typeof DeliveryRowView.static;

/** SubscriptionNames maps each existing subscription's id to its description (null: none), for naming the subscription of a delivery. */
export type SubscriptionNames = Map<string, string | null>;

/** DeliveriesView is the latest deliveries matching the filters, and how many match in all. */
export const DeliveriesView = t.Object({
  data: t.Array(DeliveryRowView),
  total: t.Integer(),
  /** the `before` of the next (older) page, or null on the last */
  next: nullableString,
  /** true on a page after the first: it is not live */
  older: t.Boolean(),
  refreshed_at: t.String(),
});
export type DeliveriesView = typeof DeliveriesView.static;

/** DeliveryWatchView is what the rotation wizard shows live about its test delivery. */
export const DeliveryWatchView = t.Object({
  id: t.String(),
  status: t.String(),
  attempts: t.Integer(),
  next_attempt_at: nullableString,
  last_attempt: t.Union([
    t.Object({
      started_at: t.String(),
      duration_ms: t.Number(),
      response_status: nullableInteger,
      response_body: nullableString,
      error: nullableString,
    }),
    t.Null(),
  ]),
});
export type DeliveryWatchView = typeof DeliveryWatchView.static;

/** ConsoleSession is a signed-in operator and the CSRF token their forms carry. */
export interface ConsoleSession {
  operator: Operator;
  csrfToken: string;
}
