import type { Server } from "bun";
import { isIP } from "node:net";

/** normalizeAddress turns an IPv4-mapped IPv6 address (::ffff:127.0.0.1) into its IPv4 form. */
function normalizeAddress(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return mapped ? mapped[1]! : address.toLowerCase();
}

/**
 * canonicalAddress writes an IP address one way whatever its spelling: IPv4 dotted (an IPv4-mapped
 * IPv6 address too), IPv6 as eight groups of four lowercase hex digits.
 */
export function canonicalAddress(address: string): string {
  let text = normalizeAddress(address);
  if (isIP(text) !== 6) return text;
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split("::") as [string, string | undefined];
  const left = head === "" ? [] : head.split(":");
  const right = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups = tail === undefined ? left : [...left, ...Array(8 - left.length - right.length).fill("0"), ...right];
  return groups.map((g) => g.padStart(4, "0")).join(":");
}

/**
 * clientNetwork is what a per-client limit counts under: an IPv4 address, or the /64 network of an
 * IPv6 address (one subscriber's: a host there can send from any of its 2^64 addresses, so a count
 * per address would give it a fresh allowance per request). Anything else is returned as it is.
 */
export function clientNetwork(address: string): string {
  const canonical = canonicalAddress(address);
  return isIP(canonical) === 6 ? `${canonical.slice(0, 19)}::/64` : canonical;
}

/** isLoopback tells whether an address is on the loopback network (127.0.0.0/8 or ::1). */
export function isLoopback(address: string): boolean {
  const a = normalizeAddress(address);
  return a === "::1" || (isIP(a) === 4 && a.startsWith("127."));
}

/**
 * isLoopbackHost tells whether a Host header names this machine by a loopback name: localhost or
 * a loopback address, with or without a port. A page that rebinds its own name to 127.0.0.1 still
 * sends that name, so a request under it is not taken for a local one.
 */
export function isLoopbackHost(host: string | null): boolean {
  const match = /^(?:\[([0-9a-f:.]+)\]|([^:[\]]+))(?::\d*)?$/i.exec(host ?? "");
  if (!match) return false;
  const name = (match[1] ?? match[2]!).toLowerCase();
  return name === "localhost" || isLoopback(name);
}

/**
 * isBrowserRequest tells whether a browser sent a request: browsers add Origin to cross-origin and
 * unsafe requests and Sec-Fetch-Site to every request, and other HTTP clients send neither.
 */
export function isBrowserRequest(request: Request): boolean {
  return request.headers.has("origin") || request.headers.has("sec-fetch-site");
}

/** ClientHints are what a request tells about its origin: the TCP peer and the forwarding headers. */
export interface ClientHints {
  peer: string | null;
  forwardedFor: string | null;
  /** true when any of Forwarded, X-Forwarded-For, X-Real-IP is present */
  forwarded: boolean;
}

/** clientHints reads what a request tells about its origin, given its TCP peer's address. */
export function clientHints(request: Request, peer: string | null): ClientHints {
  const headers = request.headers;
  return {
    peer,
    forwardedFor: headers.get("x-forwarded-for"),
    forwarded: headers.has("x-forwarded-for") || headers.has("forwarded") || headers.has("x-real-ip"),
  };
}

/**
 * clientAddress returns the address of the client: the TCP peer, or, when the peer is a trusted
 * proxy, the nearest X-Forwarded-For entry that is not itself a trusted proxy. Entries added
 * before the first untrusted hop are the client's own claims and are ignored. Null when the
 * client is unknown.
 */
export function clientAddress(hints: ClientHints, trustedProxies: string[]): string | null {
  if (hints.peer === null) return null;
  const trusted = new Set(trustedProxies.map(normalizeAddress));
  let address = normalizeAddress(hints.peer);
  if (!trusted.has(address)) return address;
  const hops = (hints.forwardedFor ?? "").split(",").map((h) => h.trim()).filter((h) => h !== "");
  // Relayed with the client named only where the service does not read it (Forwarded, X-Real-IP):
  // the client is someone behind the proxy, not the proxy's own machine.
  if (hops.length === 0 && hints.forwarded) return null;
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = normalizeAddress(hops[i]!);
    if (isIP(hop) === 0) return null; // garbled header: the client is unknown, not local
    address = hop;
    if (!trusted.has(hop)) break;
  }
  return address;
}

/**
 * addressOf names the client a per-client limit counts (the console's sign-in throttling, the
 * answers held unread): the clientNetwork of the peer, or of the client behind a trusted proxy;
 * "unknown" without either (under app.handle).
 */
export function addressOf(server: Server<unknown> | null, request: Request, trustedProxies: string[]): string {
  return clientNetwork(clientAddress(clientHints(request, server?.requestIP(request)?.address ?? null), trustedProxies) ?? "unknown");
}

/** isTrustedProxy tells whether a TCP peer is one of the configured reverse proxies. */
export function isTrustedProxy(peer: string | null, trustedProxies: string[]): boolean {
  return peer !== null && trustedProxies.some((proxy) => normalizeAddress(proxy) === normalizeAddress(peer));
}

/**
 * requestIsHttps tells whether the client reached the service over https: the request's own
 * scheme, or X-Forwarded-Proto when the peer is a trusted proxy (one that terminates TLS talks
 * plain http to the service). From any other peer the header is the client's claim and counts
 * for nothing. A list counts as https when any hop says so: a client can only make its own
 * cookies stricter, never take Secure off a cookie sent over https.
 */
export function requestIsHttps(request: { url: string; forwardedProto: string | null; peer: string | null }, trustedProxies: string[]): boolean {
  if (request.url.startsWith("https:")) return true;
  if (request.forwardedProto === null || !isTrustedProxy(request.peer, trustedProxies)) return false;
  return request.forwardedProto.split(",").some((scheme) => scheme.trim().toLowerCase() === "https");
}
