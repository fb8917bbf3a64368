import { Type } from "@sinclair/typebox";
import { t } from "elysia";
import { documentAs, documentRefused, nullableOpenEnum, openEnum } from "../http/openapi-docs.ts";
import { MAKER_KINDS } from "../shared/made-by.ts";
import { AccountSchema } from "../accounts/model.ts";
import { Contact } from "../contacts/model.ts";
import {
  DEFAULT_SECRET_GRACE_HOURS,
  MAX_ATTEMPTS_SHOWN,
  MAX_EVENTS_PER_SUBSCRIPTION,
  MAX_MAX_RATE,
  MAX_RECOVERY_DAYS,
  MAX_SECRET_GRACE_HOURS,
  MAX_SUBSCRIPTION_DESCRIPTION_LENGTH,
  MAX_TARGET_URL_LENGTH,
  MIN_MAX_RATE,
} from "../limits/limits.ts";
import { ListMetaSchema, paginationQuerySchema, timestampFilterSchema } from "../http/list-query.ts";
import { REQUEST_ID_RULE, SAFE_REQUEST_ID } from "../http/request-log.ts";

/** MAKER_KIND_WORDS say what each kind of maker an answer names (makerKind) is, and where to learn which one. */
const MAKER_KIND_WORDS =
  "api_token (a request with an API token), operator (an operator on the console), command_line (a crm command run on the server: crm operator remove --disable-subscriptions, crm secrets-key reset) or delivery_loop (the receiver answered 410 Gone, or every attempt failed for too long). Which token or operator is on the console's page of the subscription: no API answer names one.";

/** OPERATIONAL_EVENT_TYPES are events about the webhooks themselves, for an on-call system: a subscription disabled, a delivery that used up its attempts. */
export const OPERATIONAL_EVENT_TYPES = ["subscription.disabled", "delivery.exhausted"] as const;
/** WEBHOOK_EVENT_TYPES are the event kinds a subscription can ask for. */
export const WEBHOOK_EVENT_TYPES = ["contact.created", "contact.updated", "contact.deleted", "account.created", "account.updated", "account.deleted", "webhook.ping", ...OPERATIONAL_EVENT_TYPES] as const;
export type EventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/** SUBSCRIPTION_STATUSES are the states of a subscription: paused by a client, disabled by its receiver's failures or 410. */
export const SUBSCRIPTION_STATUSES = ["active", "paused", "disabled"] as const;

/** DELIVERY_STATUSES are the states of a delivery: pending until it succeeds or runs out of attempts. */
export const DELIVERY_STATUSES = ["pending", "succeeded", "failed"] as const;
/** DeliveryStatus is one of DELIVERY_STATUSES. */
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

export const SUBSCRIPTION_FILTERS = ["event"] as const;
export const DELIVERY_FILTERS = ["subscription_id", "event", "event_id", "request_id", "status", "created_after"] as const;

const kinds = WEBHOOK_EVENT_TYPES.join(", ");
// TypeBox does not check `enum` on a string schema, so enumerations are unions of literals.
const oneOf = (values: readonly string[], options: { error: string; description?: string }) => t.Union(values.map((v) => t.Literal(v)), options);
const timestamp = t.String({ format: "date-time" });
const nullableTimestamp = t.Union([timestamp, t.Null()]);

const MAX_RATE_RANGE = `a whole number of requests per second from ${MIN_MAX_RATE} to ${MAX_MAX_RATE}`;
// A Number with multipleOf, not an Integer: Elysia would take "5" (a string) for an Integer in a body.
const MaxRate = t.Number({
  multipleOf: 1,
  minimum: MIN_MAX_RATE,
  maximum: MAX_MAX_RATE,
  error: `must be ${MAX_RATE_RANGE}`,
  description: `Requests per second this receiver gets at most (${MIN_MAX_RATE} to ${MAX_MAX_RATE}), retries and recoveries included; attempts are spaced evenly. Without it, no cap beyond the delivery loop's concurrency.`,
});

/** SubscriptionInput is the body of POST /webhook-subscriptions. */
export const SubscriptionInput = t.Object(
  {
    target_url: t.String({
      maxLength: MAX_TARGET_URL_LENGTH,
      error: `must be an absolute http or https URL of at most ${MAX_TARGET_URL_LENGTH} characters`,
      description: `Absolute http(s) URL without credentials, at most ${MAX_TARGET_URL_LENGTH} characters. Hosts on loopback, private, link-local or metadata addresses are refused.`,
    }),
    // description and max_rate take null as left out, as the PATCH and the other creates do.
    description: t.Optional(
      t.Union([t.String({ maxLength: MAX_SUBSCRIPTION_DESCRIPTION_LENGTH }), t.Null()], {
        error: `must be a string of at most ${MAX_SUBSCRIPTION_DESCRIPTION_LENGTH} characters`,
        description: "Free text label; null is as if left out.",
      }),
    ),
    events: t.Array(oneOf(WEBHOOK_EVENT_TYPES, { error: `must be one of: ${kinds}` }), {
      minItems: 1,
      maxItems: MAX_EVENTS_PER_SUBSCRIPTION,
      uniqueItems: true,
      error: `must be a non-empty list of distinct event kinds from: ${kinds}`,
      description: `Event kinds to deliver: ${kinds}. subscription.disabled and delivery.exhausted report on the other subscriptions (an endpoint disabled, a delivery that used up its attempts).`,
    }),
    max_rate: t.Optional(t.Union([MaxRate, t.Null()], { error: `must be ${MAX_RATE_RANGE}` })),
  },
  { additionalProperties: false, examples: [{ target_url: "https://example.com/hooks/crm", description: "CRM sync", events: ["contact.created", "contact.updated"] }] },
);
export type SubscriptionInput = typeof SubscriptionInput.static;

/** Subscription is a stored subscription; its secret is masked except in the create response. */
export const Subscription = t.Object({
  id: t.String({ examples: ["sub_01JDB7Y1Q7A6T5ZV3C8W9X0K2M"] }),
  target_url: t.String(),
  description: t.Union([t.String(), t.Null()]),
  events: t.Array(t.String()),
  status: openEnum(SUBSCRIPTION_STATUSES, {
    description:
      "paused: events still create deliveries, which wait until the subscription is resumed; disabled: the receiver answered 410 Gone, every attempt failed for --disable-failing-after-hours, or the operator who made it was removed on the console with what they made (disabled_reason says which); nothing more is sent until POST .../enable.",
  }),
  disabled_at: nullableTimestamp,
  disabled_reason: t.Union([t.String(), t.Null()], { description: "Why it was disabled, in words; null while active." }),
  disabled_by: nullableOpenEnum(MAKER_KINDS, {
    description: `What disabled it: ${MAKER_KIND_WORDS} Null while active, and for one disabled before this was recorded (2026-11-29).`,
  }),
  paused_at: t.Union([timestamp, t.Null()], { description: "Since when the subscription is paused; null when it is not." }),
  paused_by: nullableOpenEnum(MAKER_KINDS, {
    description: `What paused it: ${MAKER_KIND_WORDS} Null when it is not paused, and for a pause made before this was recorded (2026-11-29).`,
  }),
  max_rate: t.Union([t.Integer(), t.Null()], { description: "Requests per second this receiver gets at most; null: no cap." }),
  failing_since: t.Union([timestamp, t.Null()], { description: "When the first failed attempt after the last successful one was made; null while the last attempt succeeded." }),
  held_until: t.Union([timestamp, t.Null()], {
    description:
      "Until when its receiver asked for no requests: it answered 429 or 503 with Retry-After (honoured up to 1 hour). Nothing is sent to it before then but a test ping (POST .../test); its pending deliveries keep their next_attempt_at and go out after this time, no attempt spent meanwhile. Enabling a disabled subscription ends it. Null when not held.",
  }),
  secret: t.String({ description: "Signing secret whsec_...: in full only in the create and rotate-secret responses, masked (whsec_abcd…) elsewhere." }),
  secret_rotated_at: t.Union([timestamp, t.Null()], { description: "When the secret was last rotated; null if never." }),
  previous_secret_expires_at: t.Union([timestamp, t.Null()], {
    description: "Until when requests also carry a signature with the secret before the last rotation; null if never rotated.",
  }),
  created_at: timestamp,
  updated_at: timestamp,
});
export type Subscription = typeof Subscription.static;
/** SubscriptionWithSecret is the create and rotate-secret response: the same record with the secret in full. */
export type SubscriptionWithSecret = Subscription;

/** Delivery is one event sent (or to be sent) to one subscription. */
export const Delivery = t.Object({
  id: t.String({ description: "Delivery id; sent as the webhook-id header on every attempt.", examples: ["dlv_01JDB7Y1Q7A6T5ZV3C8W9X0K2M"] }),
  event_id: t.String(),
  event_type: t.String(),
  subscription_id: t.String(),
  target_url: t.String(),
  status: openEnum(DELIVERY_STATUSES),
  attempts: t.Integer({ description: "Attempts made so far (scheduled and manual)." }),
  last_response_status: t.Union([t.Integer(), t.Null()], { description: "HTTP status of the last attempt; null if it got no response." }),
  last_error: t.Union([t.String(), t.Null()], { description: "Network error or refusal of the last attempt, in words." }),
  next_attempt_at: t.Union([timestamp, t.Null()], {
    description:
      "When the next scheduled attempt is due, never before created_at; null once succeeded or failed. A test ping (POST .../test) is due at its creation and sent ahead of its subscription's deliveries waiting, even those due earlier.",
  }),
  request_id: t.Union([t.String(), t.Null()], {
    description:
      "The X-Request-Id of the request whose change made the event (a console action's too): yours if you sent a safe one, else the req_... the answer carried. Null for events no request made (subscription.disabled and delivery.exhausted from the delivery loop, commands of the crm binary) and events an earlier crm recorded (before 2026-11-29). Not in the body sent. GET /webhook-deliveries?request_id= lists the deliveries of one request.",
  }),
  created_at: timestamp,
  updated_at: timestamp,
});
export type Delivery = typeof Delivery.static;

/** Attempt is one recorded HTTP attempt of a delivery. */
export const Attempt = t.Object({
  attempt: t.Integer({ description: "1 for the first attempt." }),
  trigger: openEnum(["scheduled", "manual"]),
  started_at: timestamp,
  duration_ms: t.Number(),
  request_headers: t.Union([t.Record(t.String(), t.String()), t.Null()], {
    description:
      "The headers sent: content-type, user-agent, webhook-id, webhook-timestamp and webhook-signature. null once the event's payload was erased (payload_erased_at): the signature, an HMAC of the payload, would confirm a guessed one, so the erasure drops them.",
  }),
  response_status: t.Union([t.Integer(), t.Null()]),
  response_headers: t.Record(t.String(), t.String(), { description: "Response headers of interest: content-type, content-encoding, content-length, retry-after, location, server, x-request-id." }),
  response_body: t.Union([t.String(), t.Null()], { description: "The first bytes of the response body: 1 KiB by default (--delivery-response-body-bytes, at most 4 KiB)." }),
  error: t.Union([t.String(), t.Null()], { description: "Network error, timeout or address refusal, in words (at most 1,000 characters); null when a response arrived." }),
});
export type Attempt = typeof Attempt.static;

/** DeliveryDetail is a delivery with the body it sends and every attempt. */
export const DeliveryDetail = t.Composite([
  Delivery,
  t.Object({
    payload: t.Unknown({
      description:
        "The JSON body sent: {type, event_id, timestamp, data}. null once erased (payload_erased_at): the record was deleted and its earlier events erased (POST /contacts/deleted/{id}/erase, /accounts/deleted/{id}/erase).",
    }),
    payload_erased_at: t.Union([timestamp, t.Null()], {
      description:
        "When the payload was erased, after its contact or account was deleted: nothing of the record is kept, shown or sent any more (a retry is 409 event-erased, a recovery skips it); each attempt's request_headers are null, its response_body null and its response_headers empty. null while the payload is kept.",
    }),
    attempt_history: t.Array(Attempt, {
      maxItems: MAX_ATTEMPTS_SHOWN,
      description: `The newest ${MAX_ATTEMPTS_SHOWN} attempts (every one, up to ${MAX_ATTEMPTS_SHOWN}), oldest first: manual retries and recoveries add attempts without end. attempts minus the attempts shown (the first shown's attempt minus 1) are left out.`,
    }),
  }),
]);
export type DeliveryDetail = typeof DeliveryDetail.static;

/** SubscriptionUpdate is the body of PATCH /webhook-subscriptions/:id. */
export const SubscriptionUpdate = t.Object(
  {
    description: t.Optional(
      t.Union([t.String({ maxLength: MAX_SUBSCRIPTION_DESCRIPTION_LENGTH }), t.Null()], {
        error: `must be a string of at most ${MAX_SUBSCRIPTION_DESCRIPTION_LENGTH} characters, or null`,
        description: "Free text label; null clears it.",
      }),
    ),
    max_rate: t.Optional(
      t.Union([MaxRate, t.Null()], {
        error: `must be ${MAX_RATE_RANGE}, or null`,
        description: "The receiver's cap in requests per second; null removes it. The delivery loop uses the new cap from its next attempt on.",
      }),
    ),
    // Declared so that a client trying to change them hears why it cannot, instead of having them dropped.
    target_url: t.Optional(t.Unknown({ description: "Not changeable in place: any value is refused (422)." })),
    events: t.Optional(t.Unknown({ description: "Not changeable in place: any value is refused (422)." })),
  },
  {
    additionalProperties: false,
    ...documentRefused(["target_url", "events"]),
    description: "The description and the rate cap change in place. The target URL and events do not: create a new subscription and delete the old one once it works (the console's rotation wizard guides this).",
    examples: [{ description: "CRM sync (production)" }, { max_rate: 5 }],
  },
);
export type SubscriptionUpdate = typeof SubscriptionUpdate.static;

/** SecretRotationInput is the body of POST /webhook-subscriptions/:id/rotate-secret. */
export const SecretRotationInput = t.Object(
  {
    // Type.Integer, not Elysia's t.Integer, which would take "24" as well as 24.
    grace_hours: t.Optional(
      Type.Integer({
        minimum: 0,
        maximum: MAX_SECRET_GRACE_HOURS,
        error: `must be a whole number of hours from 0 to ${MAX_SECRET_GRACE_HOURS}`,
        description: `How long the previous secret keeps signing beside the new one, in hours (0 to ${MAX_SECRET_GRACE_HOURS}, default ${DEFAULT_SECRET_GRACE_HOURS}). 0 ends it at once.`,
      }),
    ),
  },
  { additionalProperties: false, examples: [{ grace_hours: DEFAULT_SECRET_GRACE_HOURS }] },
);
export type SecretRotationInput = typeof SecretRotationInput.static;

/**
 * windowTime is an end of a recovery window: read by recoveryWindow (parseTimestamp, 422 "must be
 * an RFC 3339 date-time"), which takes a leap second for 23:59:59.999 as the time filters do, where
 * the date-time format refused second 60; the format is stated for the document only.
 */
const windowTime = (description: string) =>
  t.String({ ...documentAs({ type: "string", format: "date-time" }), error: "must be an RFC 3339 date-time", description });

/** RecoveryInput is the body of POST /webhook-subscriptions/:id/recover. */
export const RecoveryInput = t.Object(
  {
    since: windowTime(`Start of the window (inclusive), RFC 3339, at most ${MAX_RECOVERY_DAYS} days ago (a minute more is taken, for a window counted at the edge and confirmed a moment later). Deliveries created from then on are considered.`),
    until: t.Optional(windowTime("End of the window (exclusive), RFC 3339, after `since`; default now.")),
  },
  { additionalProperties: false, examples: [{ since: "2026-11-20T08:00:00Z", until: "2026-11-20T14:00:00Z" }] },
);
export type RecoveryInput = typeof RecoveryInput.static;

/** Recovery is the answer to a recovery: how many failed deliveries were queued again. */
export const Recovery = t.Object({
  subscription_id: t.String(),
  since: timestamp,
  until: timestamp,
  queued: Type.Integer({ description: "Failed deliveries of the window now pending again, sent oldest first through the delivery loop." }),
});
export type Recovery = typeof Recovery.static;

const eventFilter = t.Optional(oneOf(WEBHOOK_EVENT_TYPES, { error: `must be one of: ${kinds}`, description: `Event kind: ${kinds}.` }));

/** SubscriptionListQuery documents the subscription list parameters. */
export const SubscriptionListQuery = paginationQuerySchema(null, { event: eventFilter });

/** DeliveryListQuery documents the delivery list parameters. */
export const DeliveryListQuery = paginationQuerySchema(null, {
  subscription_id: t.Optional(t.String({ pattern: "^sub_[0-9A-Z]{26}$", error: "must be a subscription id (sub_...)", description: "Only deliveries to this subscription (sub_...)." })),
  event: eventFilter,
  event_id: t.Optional(t.String({ pattern: "^evt_[0-9A-Z]{26}$", error: "must be an event id (evt_...)", description: "Only deliveries of this event (evt_...)." })),
  request_id: t.Optional(
    t.String({
      pattern: SAFE_REQUEST_ID.source,
      error: `must be ${REQUEST_ID_RULE}`,
      description: "Only deliveries of the events made by the request with this X-Request-Id (the one its answer carried). A client that sends the same X-Request-Id with many requests finds all their deliveries.",
    }),
  ),
  status: t.Optional(oneOf(DELIVERY_STATUSES, { error: `must be one of: ${DELIVERY_STATUSES.join(", ")}`, description: "pending, succeeded or failed." })),
  created_after: timestampFilterSchema("Only deliveries created after this time."),
});

const LatencyPercentiles = t.Object({ p50: t.Number(), p90: t.Number(), p99: t.Number() });

/** WindowStats counts a subscription's attempts over one window. */
export const WindowStats = t.Object({
  from: t.String({ format: "date-time", description: "Start of the window: the start of the hour 24 hours (or 7 days) ago; the window runs to now." }),
  attempts: t.Integer(),
  succeeded: t.Integer({ description: "Attempts answered 2xx." }),
  failed: t.Integer({ description: "Attempts answered otherwise, or without an answer (network error, timeout, refused address)." }),
  success_rate: t.Union([t.Number(), t.Null()], { description: "succeeded / attempts, 0 to 1; null without attempts." }),
  latency_ms: t.Union([LatencyPercentiles, t.Null()], {
    description: "Attempt durations in milliseconds, each the upper bound of a histogram bucket (buckets grow by 25%, so at most 25% above the true value); null without attempts.",
  }),
});
export type WindowStats = typeof WindowStats.static;

/**
 * WAITING_COUNTED bounds a subscription's deliveries_waiting: that many means as many or more. A
 * stats request (the console's page each time it is opened) counted the whole backlog, millions of
 * index entries behind a receiver down for days, on SQLite holding up every other request meanwhile.
 */
export const WAITING_COUNTED = 10_000;

/** SubscriptionStats is a subscription's endpoint health: its state and its attempts of the last 24 hours and 7 days. */
export const SubscriptionStats = t.Object({
  subscription_id: t.String(),
  status: openEnum(SUBSCRIPTION_STATUSES, { description: "As the subscription's own status." }),
  failing_since: t.Union([timestamp, t.Null()], { description: "When the current streak of failed attempts began; null while the last attempt succeeded." }),
  deliveries_waiting: t.Integer({
    minimum: 0,
    maximum: WAITING_COUNTED,
    description:
      `Pending deliveries due now that no attempt is under way for, on any instance: waiting for a delivery slot (each instance runs at most 128 attempts at once, and fewer at once to a receiver that keeps timing out), for max_rate's pace, for the end of its receiver's hold (held_until), or, paused, for the resume. Counted up to ${WAITING_COUNTED}: ${WAITING_COUNTED} means that many or more.`,
  }),
  last_24h: WindowStats,
  last_7d: WindowStats,
});
export type SubscriptionStats = typeof SubscriptionStats.static;

export const SubscriptionEnvelope = t.Object({ data: Subscription });
export const SubscriptionStatsEnvelope = t.Object({ data: SubscriptionStats });
export const RecoveryEnvelope = t.Object({ data: Recovery });
export const SubscriptionListEnvelope = t.Object({ data: t.Array(Subscription), meta: ListMetaSchema });
export const TestEventEnvelope = t.Object({ data: t.Object({ delivery_id: t.String(), event_id: t.String() }) });
export const DeliveryEnvelope = t.Object({ data: Delivery });
export const DeliveryDetailEnvelope = t.Object({ data: DeliveryDetail });
export const DeliveryListEnvelope = t.Object({ data: t.Array(Delivery), meta: ListMetaSchema });

const payloadOf = (type: EventType, data: ReturnType<typeof t.Object>, description: string) =>
  t.Object(
    {
      type: t.Literal(type),
      event_id: t.String({ pattern: "^evt_[0-9A-Z]{26}$", description: "The event's id: the same in every subscription's copy (webhook-id is per delivery). Drop an event_id seen before." }),
      timestamp: t.String({ format: "date-time", description: "When the event happened: for a change of a contact or account, its stamp, the updated_at or deleted_at in data (ahead of the delivery's created_at while a clock stepped back catches up)." }),
      data: data,
    },
    { additionalProperties: false, description },
  );

const accountVersion = Type.Integer({ minimum: 1, description: "The account's version after this change; ignore an event whose version is not above the last one processed for this account." });
const version = Type.Integer({ minimum: 1, description: "The contact's version after this change; ignore an event whose version is not above the last one processed for this contact." });

/**
 * EVENT_CATALOGUE describes every event kind: what it means and the JSON Schema of the body
 * delivered. GET /event-types and the OpenAPI document's `webhooks` serve it.
 */
export const EVENT_CATALOGUE: Record<EventType, { description: string; schema: ReturnType<typeof t.Object> }> = {
  "contact.created": {
    description: "A contact was created. data is the contact as GET /contacts/{id} returns it (without include), version 1.",
    schema: payloadOf("contact.created", Contact, "Body of a contact.created request."),
  },
  "contact.updated": {
    description: "A contact changed (a PATCH that changes nothing sends none). data is the contact after the change; its version is one more than before.",
    schema: payloadOf("contact.updated", Contact, "Body of a contact.updated request."),
  },
  "contact.deleted": {
    description: "A contact was deleted. data names it, with the version following its last change.",
    schema: payloadOf(
      "contact.deleted",
      t.Object({ id: t.String({ pattern: "^con_[0-9A-Z]{26}$" }), version, deleted_at: t.String({ format: "date-time" }) }, { additionalProperties: false }),
      "Body of a contact.deleted request.",
    ),
  },
  "account.created": {
    description: "An account was created (POST /accounts or a batch). data is the account as GET /accounts/{id} returns it, version 1.",
    schema: payloadOf("account.created", AccountSchema, "Body of an account.created request."),
  },
  "account.updated": {
    description: "An account changed (a PATCH or batch item that changes nothing sends none). data is the account after the change; its version is one more than before.",
    schema: payloadOf("account.updated", AccountSchema, "Body of an account.updated request."),
  },
  "account.deleted": {
    description: "An account was deleted; its contacts stay and lose the link, each with its own contact.updated. data names it, with the version following its last change.",
    schema: payloadOf(
      "account.deleted",
      t.Object({ id: t.String({ pattern: "^acc_[0-9A-Z]{26}$" }), version: accountVersion, deleted_at: t.String({ format: "date-time" }) }, { additionalProperties: false }),
      "Body of an account.deleted request.",
    ),
  },
  "webhook.ping": {
    description: "A test event, sent only on request (POST /webhook-subscriptions/{id}/test) and only to that subscription.",
    schema: payloadOf("webhook.ping", t.Object({ subscription_id: t.String({ pattern: "^sub_[0-9A-Z]{26}$" }) }, { additionalProperties: false }), "Body of a webhook.ping request."),
  },  "subscription.disabled": {
    description:
      "Another subscription was disabled: its receiver answered 410 Gone, every attempt failed for --disable-failing-after-hours, or the console removed the operator who made it (or made the API token it was created with) and disabled what they made. Nothing more is sent to it until POST /webhook-subscriptions/{id}/enable. Sent to the subscriptions that ask for it, never about themselves (a disabled subscription gets nothing).",
    schema: payloadOf(
      "subscription.disabled",
      t.Object(
        {
          subscription_id: t.String({ pattern: "^sub_[0-9A-Z]{26}$" }),
          target_url: t.String(),
          description: t.Union([t.String(), t.Null()]),
          reason: t.String({ description: "Why, in words; the subscription's disabled_reason." }),
          disabled_at: t.String({ format: "date-time" }),
          failing_since: t.Union([t.String({ format: "date-time" }), t.Null()], { description: "When its streak of failed attempts began; a 410 that disabled it begins one when none ran. Null only in events recorded before 2026-11-29, when such a 410 left it null." }),
          pending_deliveries_failed: Type.Integer({ minimum: 0, description: "Its pending deliveries the disable ended as failed, unsent; one whose attempt was under way is not counted: that attempt ends it, succeeded or failed." }),
        },
        { additionalProperties: false },
      ),
      "Body of a subscription.disabled request.",
    ),
  },
  "delivery.exhausted": {
    description:
      "A delivery to another subscription used up its scheduled attempts and is failed. Deliveries of subscription.disabled and delivery.exhausted are never reported on, so a failing on-call receiver starts no chain.",
    schema: payloadOf(
      "delivery.exhausted",
      t.Object(
        {
          delivery_id: t.String({ pattern: "^dlv_[0-9A-Z]{26}$" }),
          subscription_id: t.String({ pattern: "^sub_[0-9A-Z]{26}$" }),
          event_type: t.String(),
          target_url: t.String(),
          attempts: Type.Integer({ minimum: 1 }),
          last_response_status: t.Union([Type.Integer(), t.Null()]),
          last_error: t.Union([t.String(), t.Null()]),
        },
        { additionalProperties: false },
      ),
      "Body of a delivery.exhausted request.",
    ),
  },
};

/** EventTypeInfo is one entry of GET /event-types. */
export const EventTypeInfo = t.Object({
  type: t.String({ examples: ["contact.created"] }),
  description: t.String(),
  schema: t.Record(t.String(), t.Unknown(), { description: "JSON Schema (2020-12) of the request body delivered for this event kind." }),
});
export type EventTypeInfo = typeof EventTypeInfo.static;
export const EventTypeListEnvelope = t.Object({ data: t.Array(EventTypeInfo) });
