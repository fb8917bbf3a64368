import { FormatRegistry } from "@sinclair/typebox";
import { domainToASCII } from "node:url";
import { MAX_DOMAIN_LENGTH, MAX_EMAIL_LENGTH } from "../limits/limits.ts";

// A domain has one stored form, its ASCII one: müller.de is kept, compared and filtered as
// xn--mller-kva.de (IDNA A-labels, as DNS and mail servers use it), so either spelling finds it.
// Only text holding a non-ASCII character is converted: the by-email lookup pays one regex test.

const NON_ASCII = /[^\u0000-\u007f]/;

/** DOMAIN_ASCII are the ASCII characters a domain may hold; IDNA would silently drop a path ("müller.de/x") or keep an underscore. */
const DOMAIN_ASCII = /^[A-Za-z0-9.\-\u0080-\uffff]+$/;

/** asciiDomain is a domain name's canonical form: lowercase, its Unicode labels as IDNA A-labels (xn--); null when IDNA cannot convert it. */
export function asciiDomain(domain: string): string | null {
  if (!NON_ASCII.test(domain)) return domain.toLowerCase();
  if (!DOMAIN_ASCII.test(domain)) return null;
  return domainToASCII(domain) || null;
}

/**
 * asciiEmail is an email address's canonical form: lowercased, its domain as asciiDomain gives it.
 * An address whose local part is not ASCII (RFC 6531), or whose domain IDNA cannot convert, is
 * returned as given: the email format (EMAIL_FORMAT) refuses it, and a filter of it finds nothing.
 * (Lowercased, a local part's Kelvin sign would become an ASCII k.)
 */
export function asciiEmail(email: string): string {
  if (!NON_ASCII.test(email)) return email.toLowerCase();
  const at = email.lastIndexOf("@");
  const local = email.slice(0, at);
  const domain = at < 0 || NON_ASCII.test(local) ? null : asciiDomain(email.slice(at + 1));
  return domain === null ? email : `${local.toLowerCase()}@${domain}`;
}

/** hasNonAsciiLocalPart tells whether an email address's local part (before its last @) holds a non-ASCII character. */
function hasNonAsciiLocalPart(email: unknown): boolean {
  return typeof email === "string" && NON_ASCII.test(email.slice(0, Math.max(email.lastIndexOf("@"), 0)));
}

/** EMAIL_DESCRIPTION documents an email field of a body. */
export const EMAIL_DESCRIPTION = "An email address, stored lowercased with its domain in ASCII form: info@Müller.de is info@xn--mller-kva.de. The local part (before the @) must be ASCII.";

/** LOCAL_PART_ASCII is what a refused email's detail adds when its local part is not ASCII. */
const LOCAL_PART_ASCII = "a local part must be ASCII (internationalized local parts, RFC 6531, are not accepted)";

/** emailError is the `error` of an email field: `detail`, and why when the refused address's local part is not ASCII (Elysia and fieldErrorsOf call it with the value). */
export function emailError(detail: string): (issue: { value?: unknown }) => string {
  return ({ value }) => (hasNonAsciiLocalPart(value) ? `${detail}; ${LOCAL_PART_ASCII}` : detail);
}

/**
 * EMAIL_FORMAT is the schema format of the email addresses the service stores: an address whose
 * ASCII form (asciiEmail) Elysia's "email" format accepts, at most MAX_EMAIL_LENGTH characters.
 * Documented as JSON Schema's idn-email, though its local part must be ASCII.
 */
export const EMAIL_FORMAT = "idn-email";

/** DOMAIN_FORMAT is the schema format of an account's domain: a name hostName takes. */
export const DOMAIN_FORMAT = "idn-hostname";

/** HOST_LABEL is one label of a host name in ASCII form (RFC 1123, section 2.1): 1 to 63 letters, digits and hyphens, no hyphen first or last. */
const HOST_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** LABEL_END_HYPHEN finds a label beginning or ending with a hyphen in a name as given: -müller.de is xn---mller-4ya.de, whose A-label does not. */
const LABEL_END_HYPHEN = /(^|\.)-|-(\.|$)/;

/**
 * hostName is an account domain's stored form: asciiDomain's, one trailing dot dropped
 * (engines.example. is the DNS name engines.example); null unless that is a host name of at least
 * two labels (HOST_LABEL, no label beginning or ending with a hyphen in either spelling), at most
 * MAX_DOMAIN_LENGTH characters, with a top label not all digits and xn-- labels IDNA can read.
 * The batch upsert and crm import match accounts by domain, so a value naming no company's host
 * ("..", "-", "n/a" read as "n", an address) would make every account given it one company.
 */
export function hostName(domain: string): string | null {
  const ascii = asciiDomain(domain);
  if (ascii === null || LABEL_END_HYPHEN.test(domain)) return null;
  const name = ascii.endsWith(".") ? ascii.slice(0, -1) : ascii;
  const labels = name.split(".");
  if (name.length > MAX_DOMAIN_LENGTH || labels.length < 2 || !labels.every((label) => HOST_LABEL.test(label)) || /^\d+$/.test(labels.at(-1)!)) return null;
  // domainToASCII answers "" for an xn-- label that is not valid punycode (xn--zz).
  return name.includes("xn--") && !domainToASCII(name) ? null : name;
}

/** storableEmail tells whether the service stores an email address: its ASCII form (asciiEmail) is an email address of at most MAX_EMAIL_LENGTH characters. */
function storableEmail(email: string): boolean {
  const ascii = NON_ASCII.test(email) ? asciiEmail(email) : email;
  // Elysia registers "email" when it loads, before any schema is checked.
  return ascii.length <= MAX_EMAIL_LENGTH && FormatRegistry.Get("email")!(ascii);
}

/** unstorableUnicodeEmail tells whether an address holds non-ASCII text the service never stores (a non-ASCII local part, a domain IDNA cannot convert): a filter of it could find nothing. */
export function unstorableUnicodeEmail(email: string): boolean {
  return NON_ASCII.test(email) && !storableEmail(email);
}

FormatRegistry.Set(EMAIL_FORMAT, storableEmail);
FormatRegistry.Set(DOMAIN_FORMAT, (value) => hostName(value) !== null);
