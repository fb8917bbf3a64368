import { t } from "elysia";
import { MAX_EVENTS_PER_SUBSCRIPTION, MAX_SUBSCRIPTION_DESCRIPTION_LENGTH, MAX_TARGET_URL_LENGTH } from "../limits/limits.ts";
import { ListMetaSchema, paginationQuerySchema, timestampFilterSchema } from "../http/list-query.ts";

/** WEBHOOK_EVENT_TYPES are the event kinds a subscription can ask for. */
export const WEBHOOK_EVENT_TYPES = ["contact.created", "contact.updated", "contact.deleted", "webhook.ping"] as const;
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
  status: t.String({ enum: ["active", "disabled"], description: "disabled: the receiver answered 410 Gone; nothing more is sent." }),
  disabled_at: nullableTimestamp,
  disabled_reason: t.Union([t.String(), t.Null()]),
  secret: t.String({ description: "Signing secret whsec_...: in full only in the create response, masked (whsec_abcd…) elsewhere." }),
  created_at: timestamp,
  updated_at: timestamp,
});
export type Subscription = typeof Subscription.static;
/** SubscriptionWithSecret is the create response: the same record with the secret in full. */
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
export const SubscriptionListEnvelope = t.Object({ data: t.Array(Subscription), meta: ListMetaSchema });
export const TestEventEnvelope = t.Object({ data: t.Object({ delivery_id: t.String(), event_id: t.String() }) });
export const DeliveryEnvelope = t.Object({ data: Delivery });
export const DeliveryDetailEnvelope = t.Object({ data: DeliveryDetail });
export const DeliveryListEnvelope = t.Object({ data: t.Array(Delivery), meta: ListMetaSchema });
