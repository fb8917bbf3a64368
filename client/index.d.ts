// Types of index.js. Paths, parameters, bodies and answers are checked by the compiler; an error
// answer is typed as the API's RFC 9457 problem document (Problem).
import type { Client } from "openapi-fetch";
import type { components, paths, webhooks } from "./schema.js";

export type { components, operations, paths, webhooks } from "./schema.js";

type Schemas = components["schemas"];
export type Contact = Schemas["Contact"];
export type ContactInput = Schemas["ContactInput"];
export type Account = Schemas["Account"];
export type AccountInput = Schemas["AccountInput"];
export type User = Schemas["User"];
export type Subscription = Schemas["Subscription"];
export type Delivery = Schemas["Delivery"];
export type ListMeta = Schemas["ListMeta"];
/** Problem is every error body: RFC 9457 problem details, with `errors` pointing at the fields at fault. */
export type Problem = Schemas["Problem"];

/** WebhookEventType is an event kind a subscription can ask for: contact.created, ..., delivery.exhausted. */
export type WebhookEventType = keyof webhooks;
/**
 * WebhookEvent is the body a receiver gets for an event of kind K, `{type, event_id, timestamp, data}`;
 * by default, of any kind: a union told apart by `type`.
 */
export type WebhookEvent<K extends WebhookEventType = WebhookEventType> = { [T in K]: webhooks[T]["post"]["requestBody"]["content"]["application/json"] }[K];

export interface CrmClientOptions {
  /** the server's address, e.g. https://crm.example.com */
  baseUrl: string;
  /** an API token (crm_...), from `crm token create` */
  token: string;
  /** the fetch to use (defaults to the global one) */
  fetch?: typeof globalThis.fetch;
}

export type CrmClient = Client<paths>;

/** createCrmClient answers a client whose GET/POST/PATCH/DELETE take the API's paths and send the token. */
export declare function createCrmClient(options: CrmClientOptions): CrmClient;
