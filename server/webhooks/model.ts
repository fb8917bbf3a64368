import { Type } from "@sinclair/typebox";
import { t } from "elysia";
import { AccountSchema } from "../accounts/model.ts";
import { Contact } from "../contacts/model.ts";
import {
  DEFAULT_SECRET_GRACE_HOURS,
  MAX_EVENTS_PER_SUBSCRIPTION,
  MAX_RECOVERY_DAYS,
  MAX_SECRET_GRACE_HOURS,
  MAX_SUBSCRIPTION_DESCRIPTION_LENGTH,
  MAX_TARGET_URL_LENGTH,
} from "../limits/limits.ts";
import { ListMetaSchema, paginationQuerySchema, timestampFilterSchema } from "../http/list-query.ts";

/** WEBHOOK_EVENT_TYPES are the event kinds a subscription can ask for. */
export const WEBHOOK_EVENT_TYPES = ["contact.created", "contact.updated", "contact.deleted", "account.created", "account.updated", "account.deleted", "webhook.ping"] as const;
export type EventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/** DELIVERY_STATUSES are the states of a delivery: pending until it succeeds or runs out of attempts. */
export const DELIVERY_STATUSES = ["pending", "succeeded", "failed"] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

export const SUBSCRIPTION_FILTERS = ["event"] as const;
export const DELIVERY_FILTERS = ["subscription_id", "event", "event_id", "status", "created_after"] as const;

const kinds = WEBHOOK_EVENT_TYPES.join(", ");
// TypeBox does not check `enum` on a string schema, so enumerations are unions of literals.
const oneOf = (values: readonly string[], options: { error: string; description?: string }) => t.Union(values.map((v) => t.Literal(v)), options);
const timestamp = t.String({ format: "date-time" });
const nullableTimestamp = t.Union([timestamp, t.Null()]);

/** SubscriptionInput is the body of POST /webhook-subscriptions. */
export const SubscriptionInput = t.Object(
  {
    target_url: t.String({
      maxLength: MAX_TARGET_URL_LENGTH,
      error: `must be an absolute http or https URL of at most ${MAX_TARGET_URL_LENGTH} characters`,
      description: `Absolute http(s) URL without credentials, at most ${MAX_TARGET_URL_LENGTH} characters. Hosts on loopback, private, link-local or metadata addresses are refused.`,
    }),
    description: t.Optional(
      t.String({ maxLength: MAX_SUBSCRIPTION_DESCRIPTION_LENGTH, error: `must be a string of at most ${MAX_SUBSCRIPTION_DESCRIPTION_LENGTH} characters`, description: "Free text label." }),
    ),
    events: t.Array(oneOf(WEBHOOK_EVENT_TYPES, { error: `must be one of: ${kinds}` }), {
      minItems: 1,
      maxItems: MAX_EVENTS_PER_SUBSCRIPTION,
      uniqueItems: true,
      error: `must be a non-empty list of distinct event kinds from: ${kinds}`,
      description: `Event kinds to deliver: ${kinds}.`,
    }),
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
  status: t.String({
    enum: ["active", "paused", "disabled"],
    description: "paused: events still create deliveries, which wait until the subscription is resumed; disabled: the receiver answered 410 Gone; nothing more is sent.",
  }),
  disabled_at: nullableTimestamp,
  disabled_reason: t.Union([t.String(), t.Null()]),
  paused_at: t.Union([timestamp, t.Null()], { description: "Since when the subscription is paused; null when it is not." }),
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
  status: t.String({ enum: [...DELIVERY_STATUSES] }),
  attempts: t.Integer({ description: "Attempts made so far (scheduled and manual)." }),
  last_response_status: t.Union([t.Integer(), t.Null()], { description: "HTTP status of the last attempt; null if it got no response." }),
  last_error: t.Union([t.String(), t.Null()], { description: "Network error or refusal of the last attempt, in words." }),
  next_attempt_at: t.Union([timestamp, t.Null()], { description: "When the next scheduled attempt is due; null once succeeded or failed." }),
  created_at: timestamp,
  updated_at: timestamp,
});
export type Delivery = typeof Delivery.static;

/** Attempt is one recorded HTTP attempt of a delivery. */
export const Attempt = t.Object({
  attempt: t.Integer({ description: "1 for the first attempt." }),
  trigger: t.String({ enum: ["scheduled", "manual"] }),
  started_at: timestamp,
  duration_ms: t.Number(),
  request_headers: t.Record(t.String(), t.String()),
  response_status: t.Union([t.Integer(), t.Null()]),
  response_headers: t.Record(t.String(), t.String(), { description: "Response headers of interest: content-type, content-length, retry-after, location, server, x-request-id." }),
  response_body: t.Union([t.String(), t.Null()], { description: "The first bytes of the response body: 1 KiB by default (--delivery-response-body-bytes, at most 4 KiB)." }),
  error: t.Union([t.String(), t.Null()], { description: "Network error, timeout or address refusal, in words; null when a response arrived." }),
});
export type Attempt = typeof Attempt.static;

/** DeliveryDetail is a delivery with the body it sends and every attempt. */
export const DeliveryDetail = t.Composite([
  Delivery,
  t.Object({
    payload: t.Unknown({ description: "The JSON body sent: {type, timestamp, data}." }),
    attempt_history: t.Array(Attempt, { description: "Every attempt, oldest first." }),
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
    // Declared so that a client trying to change them hears why it cannot, instead of having them dropped.
    target_url: t.Optional(t.Unknown({ description: "Not changeable in place: any value is refused (422)." })),
    events: t.Optional(t.Unknown({ description: "Not changeable in place: any value is refused (422)." })),
  },
  {
    additionalProperties: false,
    description: "The target URL and events do not change in place: create a new subscription and delete the old one once it works (the console's rotation wizard guides this).",
    examples: [{ description: "CRM sync (production)" }],
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

/** RecoveryInput is the body of POST /webhook-subscriptions/:id/recover. */
export const RecoveryInput = t.Object(
  {
    since: t.String({
      format: "date-time",
      error: "must be an RFC 3339 date-time",
      description: `Start of the window (inclusive), RFC 3339, at most ${MAX_RECOVERY_DAYS} days ago. Deliveries created from then on are considered.`,
    }),
    until: t.Optional(
      t.String({ format: "date-time", error: "must be an RFC 3339 date-time", description: "End of the window (exclusive), RFC 3339, after `since`; default now." }),
    ),
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
  subscription_id: t.Optional(t.String({ maxLength: 64, description: "Only deliveries to this subscription (sub_...)." })),
  event: eventFilter,
  event_id: t.Optional(t.String({ maxLength: 64, description: "Only deliveries of this event (evt_...)." })),
  status: t.Optional(oneOf(DELIVERY_STATUSES, { error: `must be one of: ${DELIVERY_STATUSES.join(", ")}`, description: "pending, succeeded or failed." })),
  created_after: timestampFilterSchema("Only deliveries created after this time."),
});

export const SubscriptionEnvelope = t.Object({ data: Subscription });
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
      timestamp: t.String({ format: "date-time", description: "When the event happened." }),
      data: data,
    },
    { additionalProperties: false, description },
  );

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
    description: "An account was created (POST /accounts or a batch). data is the account as GET /accounts/{id} returns it.",
    schema: payloadOf("account.created", AccountSchema, "Body of an account.created request."),
  },
  "account.updated": {
    description: "An account changed (a PATCH or batch item that changes nothing sends none). data is the account after the change.",
    schema: payloadOf("account.updated", AccountSchema, "Body of an account.updated request."),
  },
  "account.deleted": {
    description: "An account was deleted; its contacts stay and lose the link, each with its own contact.updated. data names it.",
    schema: payloadOf(
      "account.deleted",
      t.Object({ id: t.String({ pattern: "^acc_[0-9A-Z]{26}$" }), deleted_at: t.String({ format: "date-time" }) }, { additionalProperties: false }),
      "Body of an account.deleted request.",
    ),
  },
  "webhook.ping": {
    description: "A test event, sent only on request (POST /webhook-subscriptions/{id}/test) and only to that subscription.",
    schema: payloadOf("webhook.ping", t.Object({ subscription_id: t.String({ pattern: "^sub_[0-9A-Z]{26}$" }) }, { additionalProperties: false }), "Body of a webhook.ping request."),
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
