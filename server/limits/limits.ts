// The service's documented limits: the one place their values live. TypeBox models, services,
// the HTTP guard and the README table all take them from here (a test keeps the README in step).

/** MAX_NAME_LENGTH bounds first_name, last_name and an account's and a user's name, in characters. */
export const MAX_NAME_LENGTH = 200;
/** MAX_EMAIL_LENGTH is the longest email address (RFC 5321 path limit), in characters. */
export const MAX_EMAIL_LENGTH = 254;
/**
 * IN_ASCII_FORM says how an email's and a domain's length is counted: on the form stored, whose
 * domain a Unicode one (IDNA) makes longer, so an address shorter than the limit as sent can pass it.
 */
export const IN_ASCII_FORM = "counted in ASCII form (müller.de as xn--mller-kva.de)";
/** MAX_PHONE_LENGTH bounds a phone number, in characters. */
export const MAX_PHONE_LENGTH = 50;
/** MAX_EXTERNAL_ID_LENGTH bounds a contact's external_id (its id in the source system), in characters. */
export const MAX_EXTERNAL_ID_LENGTH = 255;
/**
 * LENGTH_COUNTING says how every length in characters above is counted (JavaScript's string
 * length), where JSON Schema's maxLength counts code points: README's Limits, the OpenAPI
 * description of each limited string and the 422 of a string that only this counting refuses say it in these words.
 */
export const LENGTH_COUNTING = "counted in UTF-16 code units: a character outside the Basic Multilingual Plane, as most emoji are, counts as two";
/** MAX_BATCH_ITEMS is the number of items one batch upsert takes. */
export const MAX_BATCH_ITEMS = 100;
/**
 * BATCH_ITEMS_PER_WRITE: a batch counts as one write for the rate limiter per this many items or
 * part of them (100 items: 2 writes), all but the first charged after the batch is admitted so it
 * never waits twice. At the default 50 writes per second a token imports at most 2,500 contacts per
 * second, whatever its batch size: 100,000 in about 40 s. One more write per 10 items (the first
 * rule) held an import to 450 per second; one plus one per 100 let batches of 99 import 4,950.
 */
export const BATCH_ITEMS_PER_WRITE = 50;
/** MAX_DOMAIN_LENGTH is the longest DNS name, in characters. */
export const MAX_DOMAIN_LENGTH = 253;
/** MAX_TAGS is the number of tags a contact can carry. */
export const MAX_TAGS = 100;
/** MAX_TAG_LENGTH bounds one tag, in characters. */
export const MAX_TAG_LENGTH = 100;
/** MAX_RELATED_IDS bounds account_ids and assigned_user_ids. */
export const MAX_RELATED_IDS = 100;
/** MAX_CUSTOM_FIELDS is the number of keys custom_fields can hold. */
export const MAX_CUSTOM_FIELDS = 100;
/** MAX_CUSTOM_FIELD_KEY_LENGTH bounds every key inside custom_fields, at any depth, in characters. */
export const MAX_CUSTOM_FIELD_KEY_LENGTH = 100;
/** MAX_CUSTOM_FIELDS_DEPTH is how deep values may nest inside custom_fields (an object of scalars is 1). */
export const MAX_CUSTOM_FIELDS_DEPTH = 5;
/** MAX_CUSTOM_FIELDS_BYTES bounds custom_fields serialised as JSON, in UTF-8 bytes. */
export const MAX_CUSTOM_FIELDS_BYTES = 16 * 1024;
/** MAX_CONSENT_BYTES bounds consent serialised as JSON, in UTF-8 bytes. */
export const MAX_CONSENT_BYTES = 4 * 1024;
/** MAX_EXTRA_PROPERTIES_BYTES bounds the further (undeclared) properties of a record together, as JSON bytes. */
export const MAX_EXTRA_PROPERTIES_BYTES = 64 * 1024;
/**
 * MAX_INCLUDE_PAGE_BYTES bounds a page of contacts with `include` as JSON. Each contact embeds its
 * accounts in full, so a page grew with contacts times accounts: 100 contacts linked to the same
 * 100 accounts of 64 KiB made 657 MB. One contact with every relation at every limit takes about
 * 7 MB (100 accounts of 64 KiB and a 200-character name, 100 users, its own 160 KB), so it fits.
 */
export const MAX_INCLUDE_PAGE_BYTES = 8 * 1024 * 1024;
/** MAX_SUBSCRIPTION_DESCRIPTION_LENGTH bounds a webhook subscription's description, in characters. */
export const MAX_SUBSCRIPTION_DESCRIPTION_LENGTH = 500;
/** MAX_TARGET_URL_LENGTH bounds a webhook subscription's target_url, in characters. */
export const MAX_TARGET_URL_LENGTH = 2048;
/** MAX_EVENTS_PER_SUBSCRIPTION is the number of event kinds one subscription can list (all of them). */
export const MAX_EVENTS_PER_SUBSCRIPTION = 9;
/** MIN_MAX_RATE and MAX_MAX_RATE bound a subscription's max_rate, in requests per second. */
export const MIN_MAX_RATE = 1;
export const MAX_MAX_RATE = 1000;
/**
 * MAX_SUBSCRIPTIONS is the number of webhook subscriptions the service keeps. Subscriptions
 * belong to the whole service, not to the token that created them (any token lists and deletes
 * them all), so the cap is on all of them together: it bounds the fan-out of every event.
 */
export const MAX_SUBSCRIPTIONS = 100;
/** DEFAULT_SECRET_GRACE_HOURS is how long a rotated-out signing secret keeps signing unless the rotation says otherwise. */
export const DEFAULT_SECRET_GRACE_HOURS = 24;
/** MAX_SECRET_GRACE_HOURS is the longest grace period a secret rotation can ask for (7 days). */
export const MAX_SECRET_GRACE_HOURS = 168;
/**
 * MAX_ADDRESSES_PER_ATTEMPT is how many of a target name's addresses one webhook attempt connects
 * to at most. The name's owner decides how many it has: thousands, each refusing, made one attempt
 * a port scan from the service's address and its recorded error tens of kilobytes.
 */
export const MAX_ADDRESSES_PER_ATTEMPT = 4;
/**
 * MAX_ATTEMPTS_SHOWN is how many of a delivery's attempts its detail shows, the newest: manual
 * retries and recoveries add attempts without end, each up to about 6 KB of the detail.
 */
export const MAX_ATTEMPTS_SHOWN = 50;
/** MAX_RECOVERY_DAYS is how far back a recovery window may start. */
export const MAX_RECOVERY_DAYS = 14;
/**
 * RECOVERY_GRACE_MS is how much further back than MAX_RECOVERY_DAYS a recovery window's start is
 * still taken: a window counted at the edge (the console's preview, a client's "14 days ago") is
 * confirmed a moment later, which refused it once the edge had moved on.
 */
export const RECOVERY_GRACE_MS = 60_000;
/** RETRY_AFTER_CAP_MS caps how far a receiver's Retry-After can push the next attempt of its delivery, and hold its subscription (1 hour). */
export const RETRY_AFTER_CAP_MS = 60 * 60 * 1000;
/** MIN_OPERATOR_PASSWORD_LENGTH and MAX_OPERATOR_PASSWORD_LENGTH bound a console operator's password (argon2 hashes any length; the bound keeps a sign-in from buying much CPU). */
export const MIN_OPERATOR_PASSWORD_LENGTH = 10;
export const MAX_OPERATOR_PASSWORD_LENGTH = 512;
/** MAX_BODY_BYTES is the largest request body accepted (1 MiB). */
export const MAX_BODY_BYTES = 1024 * 1024;
/**
 * MAX_IMPORT_RECORD_LENGTH bounds one CSV record or JSON Lines line `crm import` reads, in
 * characters: four request bodies, more than any row it could send (ignored columns included).
 * Unbounded, a quote never closed made the rest of the file one record held in memory.
 */
export const MAX_IMPORT_RECORD_LENGTH = 4 * MAX_BODY_BYTES;
/**
 * MAX_FORM_BYTES is the largest console form accepted (64 KiB): its forms hold a few short fields,
 * and the sign-in form is open to anyone, who would otherwise hold 1 MiB of the body budget per
 * connection without a credential.
 */
export const MAX_FORM_BYTES = 64 * 1024;
/** MAX_JSON_DEPTH is how deep arrays and objects may nest in a request body. */
export const MAX_JSON_DEPTH = 32;
/** MAX_QUERY_BYTES bounds the query string (after "?"), in bytes. */
export const MAX_QUERY_BYTES = 4 * 1024;
/** MAX_HEADER_BYTES bounds all request header lines together (names, values, ": " and CRLF), in bytes. */
export const MAX_HEADER_BYTES = 8 * 1024;
/** MAX_HEADER_FIELDS is the number of request header fields accepted. */
export const MAX_HEADER_FIELDS = 100;
/** BUN_MAX_HEADER_BYTES is Bun's own header buffer; beyond it Bun answers a bare 431 before the app runs. */
export const BUN_MAX_HEADER_BYTES = 16 * 1024;
/** BUN_MAX_HEADER_FIELDS is about where Bun itself answers a bare 431 for the number of header fields. */
const BUN_MAX_HEADER_FIELDS = 198;
/** BUN_TIMER_GRANULARITY_SECONDS is how often Bun checks connection timeouts: they fire up to this much late. */
export const BUN_TIMER_GRANULARITY_SECONDS = 4;
/** HEADER_READ_TIMEOUT_SECONDS is uWebSockets' fixed deadline for a complete request head (not configurable in Bun 1.4). */
const HEADER_READ_TIMEOUT_SECONDS = 10;

/** LimitRow is one line of the documented limits table. */
export interface LimitRow {
  limit: string;
  value: string;
  answer: string;
}

/** byteSize writes a size of whole KiB or MiB as the README and the answers do: "64 KiB", "1 MiB". */
export const byteSize = (bytes: number) => (bytes >= 1024 * 1024 ? `${bytes / 1024 / 1024} MiB` : `${bytes / 1024} KiB`);

/** LIMIT_TABLE is the README's table of fixed limits, built from the constants above. */
export const LIMIT_TABLE: LimitRow[] = [
  { limit: "`first_name`, `last_name` (contact), `name` (account, user)", value: `${MAX_NAME_LENGTH} characters`, answer: "422" },
  { limit: "`email`", value: `${MAX_EMAIL_LENGTH} characters, its domain ${IN_ASCII_FORM}`, answer: "422" },
  { limit: "`phone`", value: `${MAX_PHONE_LENGTH} characters`, answer: "422" },
  { limit: "`external_id` (contact)", value: `1 to ${MAX_EXTERNAL_ID_LENGTH} characters`, answer: "422" },
  { limit: "items in one batch upsert (`/contacts/batch`, `/accounts/batch`)", value: `1 to ${MAX_BATCH_ITEMS}`, answer: "422" },
  { limit: "`domain` (account)", value: `${MAX_DOMAIN_LENGTH} characters, ${IN_ASCII_FORM}`, answer: "422" },
  { limit: "`tags`: number of tags", value: `${MAX_TAGS}`, answer: "422" },
  { limit: "`tags`: length of one tag", value: `1 to ${MAX_TAG_LENGTH} characters`, answer: "422" },
  { limit: "`account_ids`, `assigned_user_ids`", value: `${MAX_RELATED_IDS} ids`, answer: "422" },
  { limit: "`custom_fields`: number of keys", value: `${MAX_CUSTOM_FIELDS}`, answer: "422" },
  { limit: "`custom_fields`: length of a key (any depth)", value: `${MAX_CUSTOM_FIELD_KEY_LENGTH} characters`, answer: "422" },
  { limit: "`custom_fields`: nesting depth", value: `${MAX_CUSTOM_FIELDS_DEPTH} levels`, answer: "422" },
  { limit: "`custom_fields`: total size as JSON", value: byteSize(MAX_CUSTOM_FIELDS_BYTES), answer: "422" },
  { limit: "`consent`: total size as JSON", value: byteSize(MAX_CONSENT_BYTES), answer: "422" },
  { limit: "further (undeclared) properties of a contact or account, together, as JSON", value: byteSize(MAX_EXTRA_PROPERTIES_BYTES), answer: "422" },
  {
    limit: "a page of contacts with `include` (`GET /contacts`), as JSON",
    value: byteSize(MAX_INCLUDE_PAGE_BYTES),
    answer: "a page by `cursor` ends before `per_page`, its `next_cursor` going on from there; a page by number is 422 naming `per_page` and how many of its contacts fit",
  },
  { limit: "webhook subscription `description`", value: `${MAX_SUBSCRIPTION_DESCRIPTION_LENGTH} characters`, answer: "422" },
  { limit: "webhook subscription `target_url`", value: `${MAX_TARGET_URL_LENGTH} characters`, answer: "422" },
  { limit: "webhook subscription `events`", value: `${MAX_EVENTS_PER_SUBSCRIPTION} event kinds`, answer: "422" },
  { limit: "webhook subscription `max_rate`", value: `${MIN_MAX_RATE} to ${MAX_MAX_RATE} requests per second`, answer: "422" },
  { limit: "webhook subscriptions, all tokens together (subscriptions are not owned by a token)", value: `${MAX_SUBSCRIPTIONS}`, answer: "422" },
  { limit: "webhook secret rotation `grace_hours`", value: `0 to ${MAX_SECRET_GRACE_HOURS} (default ${DEFAULT_SECRET_GRACE_HOURS})`, answer: "422" },
  { limit: "webhook recovery window: how far back `since` may be", value: `${MAX_RECOVERY_DAYS} days, and ${RECOVERY_GRACE_MS / 1000} s of grace`, answer: "422" },
  { limit: "addresses of a webhook target's name one attempt connects to", value: `${MAX_ADDRESSES_PER_ATTEMPT}`, answer: "the rest are not tried; the attempt's `error` counts them" },
  { limit: "attempts a delivery's detail shows (`attempt_history`)", value: `the newest ${MAX_ATTEMPTS_SHOWN}`, answer: "the earlier ones are left out: `attempts` minus the attempts shown" },
  { limit: "console operator password", value: `${MIN_OPERATOR_PASSWORD_LENGTH} to ${MAX_OPERATOR_PASSWORD_LENGTH} characters`, answer: "422 (console form, CLI error)" },
  { limit: "request body", value: byteSize(MAX_BODY_BYTES), answer: "413" },
  { limit: "one CSV record or JSON Lines line of a file `crm import` reads", value: `${MAX_IMPORT_RECORD_LENGTH} characters`, answer: "the import stops before sending anything, naming the line" },
  { limit: "console form", value: byteSize(MAX_FORM_BYTES), answer: "413 (console page)" },
  { limit: "JSON nesting depth of a request body", value: `${MAX_JSON_DEPTH} levels`, answer: "400" },
  { limit: "JSON numbers", value: `magnitude at most ${Number.MAX_SAFE_INTEGER} (2^53 - 1)`, answer: "400" },
  { limit: "query string", value: byteSize(MAX_QUERY_BYTES), answer: "414" },
  { limit: "request headers, all together", value: byteSize(MAX_HEADER_BYTES), answer: "431" },
  { limit: "request header fields", value: `${MAX_HEADER_FIELDS}`, answer: "431" },
  { limit: "request line and headers, Bun's own buffer", value: `${byteSize(BUN_MAX_HEADER_BYTES)} or ${BUN_MAX_HEADER_FIELDS} fields (bare 431 from Bun, no body)`, answer: "431" },
  { limit: "time to send the request headers", value: `${HEADER_READ_TIMEOUT_SECONDS} s (fixed by Bun)`, answer: "connection closed" },
];

/** ParserAnswer is a kind of malformed request Bun's HTTP parser answers itself, before the app sees it. */
interface ParserAnswer {
  request: string;
  answer: string;
}

/**
 * BUN_PARSER_ANSWERS lists the malformed requests the service cannot answer with problem+json:
 * Bun (uWebSockets) refuses them while parsing, and the app never sees them. The README's Limits
 * section lists them from here; a test sends each over a raw socket to keep the list true.
 */
export const BUN_PARSER_ANSWERS: ParserAnswer[] = [
  { request: "a raw space or control character in the request target (`GET /a b HTTP/1.1`)", answer: "505, no body, connection closed" },
  { request: "a protocol version other than `HTTP/1.0` and `HTTP/1.1`, or none (HTTP/0.9)", answer: "505, no body, connection closed" },
  { request: "lines ended by a bare LF instead of CRLF", answer: "505, no body, connection closed" },
  { request: "both `Content-Length` and `Transfer-Encoding`", answer: "400, no body, connection closed" },
  { request: "`Content-Length` repeated with another value, given as a list (`5, 5`), not a number, or 2^59 (576460752303423488) or more", answer: "400, no body, connection closed" },
  { request: "a `Transfer-Encoding` other than `chunked`", answer: "400, no body, connection closed" },
  { request: "a request target that is neither a path starting with `/` nor an absolute URL (`OPTIONS *`, `GET host:443`, `GET healthz`, `GET ?a=1`)", answer: "400, no body, connection closed" },
  { request: "`HTTP/1.1` without `Host`", answer: "400, no body, connection closed" },
  { request: "a header line without a colon, with a space in its name, folded onto a second line, or with a NUL byte", answer: "400, no body, connection closed" },
  { request: "bytes that are not HTTP at all (a TLS handshake on the plain-HTTP port)", answer: "400, no body, connection closed" },
  { request: "a method in lowercase, or one Bun does not know (`get`, `FOO`)", answer: "connection closed without an answer" },
];
