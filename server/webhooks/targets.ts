import { closeSync, openSync, readFileSync } from "node:fs";
import { isIPv4, isIPv6 } from "node:net";
import { MAX_ADDRESSES_PER_ATTEMPT } from "../limits/limits.ts";
import { codePointName } from "../shared/text.ts";
import { errorCode } from "../shared/thrown.ts";

const MAX_URL_LENGTH = 2048;

// The URL is stored as written and read again by receivers' tools and other parsers, so it must
// mean the same host to all of them. WHATWG URL (ours) reads a backslash as a slash and drops
// tabs, newlines and leading or trailing controls; an RFC 3986 parser reads
// http://8.8.8.8\@127.0.0.1/ as host 127.0.0.1. Such characters are refused, not rewritten.
const AMBIGUOUS_CHARACTER = /[\\\p{Cc}\s]/u;

/** authorityOf returns the authority of an http(s) URL as written: after the scheme's slashes, up to the path, query or fragment. */
const authorityOf = (raw: string) => /^[^:]*:\/*([^/?#]*)/.exec(raw)![1]!;

/** checkTargetUrl returns why a string cannot be a webhook target URL, or null when it can. */
export function checkTargetUrl(raw: string): string | null {
  if (raw.length > MAX_URL_LENGTH) return `must be at most ${MAX_URL_LENGTH} characters`;
  const ambiguous = AMBIGUOUS_CHARACTER.exec(raw);
  if (ambiguous) {
    return `must not contain a backslash, control character or whitespace (${codePointName(ambiguous[0])} at character ${ambiguous.index + 1}); percent-encode it in the path or query`;
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "must be an absolute http or https URL";
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return "must use http or https";
  // WHATWG URL also reads http:host/ and http:///host/ as host; an RFC 3986 parser reads no host in either.
  if (!/^https?:\/\/[^/]/i.test(raw)) return "must be written scheme://host/... (two slashes, then the host)";
  // Any '@' in the authority is userinfo, even an empty one (http://:@host/) that URL does not report.
  if (authorityOf(raw).includes("@")) return "must not contain credentials (user:password@); authenticate requests by their signature";
  if (url.hostname === "") return "must name a host";
  if (url.port === "0") return "must not use port 0, which no receiver can listen on; give the receiver's port or none";
  return null;
}

type Range = [base: bigint, prefixBits: number, label: string];

// Everything a webhook must not reach unless private targets are allowed. Order matters only
// for the label: the first matching range names the refusal.
const IPV4_RANGES: [string, number, string][] = [
  ["0.0.0.0", 8, "unspecified"],
  ["127.0.0.0", 8, "loopback"],
  ["10.0.0.0", 8, "private"],
  ["172.16.0.0", 12, "private"],
  ["192.168.0.0", 16, "private"],
  ["100.64.0.0", 10, "shared (carrier-grade NAT, cloud metadata)"],
  ["169.254.0.0", 16, "link-local (cloud metadata)"],
  ["192.0.0.0", 24, "reserved"],
  ["192.0.2.0", 24, "documentation"],
  ["192.88.99.0", 24, "reserved"],
  ["198.18.0.0", 15, "reserved"],
  ["198.51.100.0", 24, "documentation"],
  ["203.0.113.0", 24, "documentation"],
  ["224.0.0.0", 4, "multicast"],
  ["240.0.0.0", 4, "reserved"],
];

const IPV6_RANGES: [string, number, string][] = [
  ["::", 128, "unspecified"],
  ["::1", 128, "loopback"],
  ["::ffff:0:0", 96, "IPv4-mapped IPv6"],
  // Inside ::/8, so before it.
  ["64:ff9b:1::", 48, "private (NAT64 local use)"],
  ["::", 8, "reserved"],
  ["100::", 64, "reserved (discard)"],
  ["100:0:0:1::", 64, "reserved (dummy prefix)"],
  ["2001::", 32, "reserved (Teredo)"],
  ["2001:2::", 48, "reserved (benchmarking)"],
  // ORCHIDs name hosts cryptographically and are not routed; the first version is deprecated.
  ["2001:10::", 28, "reserved (ORCHID)"],
  ["2001:20::", 28, "reserved (ORCHIDv2)"],
  ["2001:db8::", 32, "documentation"],
  ["3fff::", 20, "documentation"],
  ["5f00::", 16, "reserved (segment routing)"],
  ["fc00::", 7, "private (unique local)"],
  ["fe80::", 10, "link-local"],
  ["fec0::", 10, "private (site-local)"],
  ["ff00::", 8, "multicast"],
];

function ipv4Value(address: string): bigint {
  return address.split(".").reduce((acc, part) => (acc << 8n) | BigInt(Number(part)), 0n);
}

function ipv6Value(address: string): bigint {
  let text = address;
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4) {
    const n = ipv4Value(v4[1]!);
    text = `${text.slice(0, v4.index)}${(n >> 16n).toString(16)}:${(n & 0xffffn).toString(16)}`;
  }
  const [head, tail] = text.includes("::") ? text.split("::") : [text, undefined];
  const left = head ? head.split(":") : [];
  const right = tail ? tail.split(":") : [];
  const groups = tail === undefined ? left : [...left, ...Array(8 - left.length - right.length).fill("0"), ...right];
  return groups.reduce((acc, group) => (acc << 16n) | BigInt(parseInt(group, 16)), 0n);
}

const compile = (ranges: [string, number, string][], value: (a: string) => bigint, bits: number): Range[] =>
  ranges.map(([base, prefix, label]) => [value(base) >> BigInt(bits - prefix), prefix, label]);
const V4 = compile(IPV4_RANGES, ipv4Value, 32);
const V6 = compile(IPV6_RANGES, ipv6Value, 128);
const NAT64_PREFIX = ipv6Value("64:ff9b::") >> 32n;

function match(ranges: Range[], value: bigint, bits: number): string | null {
  for (const [base, prefix, label] of ranges) {
    if (value >> BigInt(bits - prefix) === base) return label;
  }
  return null;
}

/** bareAddress is an address without the brackets of a URL's IPv6 host or a zone id (fe80::1%eth0). */
const bareAddress = (address: string) => address.replace(/^\[|\]$/g, "").replace(/%.*$/, "");

/**
 * nonPublicAddressKind names the kind of a loopback, private, link-local, metadata, reserved or
 * IPv4-mapped address, or returns null for a public one. IPv6 forms that embed an IPv4 address
 * (NAT64, 6to4) are judged by that address.
 */
export function nonPublicAddressKind(address: string): string | null {
  const bare = bareAddress(address);
  if (isIPv4(bare)) return match(V4, ipv4Value(bare), 32);
  if (!isIPv6(bare)) return "not an IP address";
  const value = ipv6Value(bare);
  // NAT64 sits inside ::/8, so it is judged before the table.
  if (value >> 32n === NAT64_PREFIX) return match(V4, value & 0xffffffffn, 32);
  if (value >> 112n === 0x2002n) return match(V4, (value >> 80n) & 0xffffffffn, 32);
  return match(V6, value, 128);
}

/**
 * PrivateTargets is which non-public addresses webhook targets may use (--allow-private-targets):
 * every one (true), none (false), or those inside the listed networks, written 10.0.0.0/8, fd12::/16
 * or as a single address, and no other: listing the receivers' network leaves loopback, cloud
 * metadata and the rest refused.
 */
export type PrivateTargets = boolean | readonly string[];

/** AddressBlock is a network as compared: its family's width in bits, its prefix length and its value shifted down to the prefix. */
interface AddressBlock {
  bits: number;
  prefix: number;
  base: bigint;
}

/** addressBlock reads a network (10.0.0.0/8, fd12::/16) or a single address, or returns why it is not one. */
function addressBlock(text: string): AddressBlock | string {
  if (text === "") return "an entry is empty";
  const [address, prefixText, ...rest] = text.split("/");
  const bits = isIPv4(address!) ? 32 : isIPv6(address!) ? 128 : 0;
  if (bits === 0 || address!.includes("%") || rest.length > 0 || (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText))) return `${text} is not an IP address or network`;
  const prefix = prefixText === undefined ? bits : Number(prefixText);
  if (prefix > bits) return `${text} has a prefix longer than ${bits} bits`;
  const value = bits === 32 ? ipv4Value(address!) : ipv6Value(address!);
  // 10.1.0.0/8 is most likely a mistyped /16: which network was meant is not guessed.
  if (value & ((1n << BigInt(bits - prefix)) - 1n)) return `${text} has address bits set past its /${prefix} prefix`;
  return { bits, prefix, base: value >> BigInt(bits - prefix) };
}

/** networkError returns why a --allow-private-targets entry is not a network or an address, or null when it is one. */
export function networkError(text: string): string | null {
  const block = addressBlock(text);
  return typeof block === "string" ? block : null;
}

/** privateTargetAllowed tells whether a non-public address may be a target's under `privateTargets`. */
function privateTargetAllowed(address: string, privateTargets: PrivateTargets): boolean {
  if (typeof privateTargets === "boolean") return privateTargets;
  const bare = bareAddress(address);
  const bits = isIPv4(bare) ? 32 : isIPv6(bare) ? 128 : 0;
  if (bits === 0) return false;
  const value = bits === 32 ? ipv4Value(bare) : ipv6Value(bare);
  return privateTargets.some((network) => {
    const block = addressBlock(network) as AddressBlock;
    return block.bits === bits && value >> BigInt(bits - block.prefix) === block.base;
  });
}

/**
 * TargetRefused says why a target host may not be contacted. Its message is for API clients: of a
 * name, it says what kind of address the name resolves to, not the address (a token holder would
 * map the operator's internal names); `address` is that address, for the operator's log.
 */
export class TargetRefused extends Error {
  constructor(
    message: string,
    readonly address: string | null = null,
  ) {
    super(message);
  }
}

/** anAddressOf words a kind of address nonPublicAddressKind names as "a private address", "an unspecified address". */
const anAddressOf = (kind: string) => (kind === "not an IP address" ? "something that is not an IP address" : `${/^[aeiouIU]/.test(kind) ? "an" : "a"} ${kind} address`);

/** Resolver returns every address a host name resolves to. */
export type Resolver = (hostname: string) => Promise<string[]>;

/**
 * Network is how deliveries reach receivers: the resolver (tests inject one that answers what
 * they need, such as a name that rebinds to 127.0.0.1) and certificate authorities trusted on top
 * of the system's (tests with a self-signed receiver).
 */
export interface Network {
  resolve: Resolver;
  ca?: string;
}

/**
 * RESOLVE_CACHE_MS is how long a name's addresses are reused: as long as Bun's fetch keeps them
 * (BUN_CONFIG_DNS_TIME_TO_LIVE_SECONDS, 30 s), which connected by name before the pinned connect.
 * A lookup costs ~20 us of CPU, a quarter of a whole delivery. Reuse is safe: every attempt checks
 * the addresses it connects to, cached or not.
 */
const RESOLVE_CACHE_MS = 30_000;
/** RESOLVE_CACHE_SIZE bounds the names kept; targets are few (one per subscription). */
const RESOLVE_CACHE_SIZE = 1000;

/** cachedResolver returns a resolver that reuses each name's answer (or lookup under way) for `ttlMs`; failures are not kept. */
export function cachedResolver(resolve: Resolver, ttlMs: number, now: () => number = Date.now): Resolver {
  const cache = new Map<string, { addresses: Promise<string[]>; expires: number }>();
  return (hostname) => {
    const hit = cache.get(hostname);
    if (hit && hit.expires > now()) return hit.addresses;
    if (cache.size >= RESOLVE_CACHE_SIZE) cache.delete(cache.keys().next().value!);
    const addresses = resolve(hostname);
    cache.set(hostname, { addresses, expires: now() + ttlMs });
    addresses.catch(() => cache.delete(hostname));
    return addresses;
  };
}

/** HOSTS_FILE is where names are looked up before DNS, as getaddrinfo does under nsswitch's usual `hosts: files dns`. */
const HOSTS_FILE = "/etc/hosts";

/**
 * hostsFileAddresses returns the addresses of every line of a hosts file that lists the name, in
 * file order, as getaddrinfo does; c-ares answers from the first such line alone, so a name listed
 * with a public and then a private address would have passed the check. The file is small and read
 * synchronously: an asynchronous read would wait for Bun's thread pool.
 */
function hostsFileAddresses(hostname: string, hostsFile: string): string[] {
  let text: string;
  try {
    text = readFileSync(hostsFile, "utf8");
  } catch {
    return [];
  }
  const name = hostname.toLowerCase();
  return text.split("\n").flatMap((line) => {
    const [address, ...names] = line.replace(/#.*/, "").trim().split(/\s+/);
    return address && names.some((listed) => listed.toLowerCase() === name) ? [address] : [];
  });
}

/**
 * systemLookup returns every address of a name: those of its lines in the hosts file, or else the
 * answer of the name servers in /etc/resolv.conf, asked through c-ares, which waits for them on the
 * event loop. getaddrinfo (node:dns lookup) holds one of the few threads Bun shares among all
 * lookups for as long as a name server keeps it waiting (10 s for a silent one, past the attempt
 * that asked), so one subscriber's silent name server held up every other target's lookup.
 */
export async function systemLookup(hostname: string, hostsFile = HOSTS_FILE): Promise<string[]> {
  const listed = hostsFileAddresses(hostname, hostsFile);
  if (listed.length > 0) return listed;
  try {
    return (await Bun.dns.lookup(hostname, { backend: "c-ares" })).map((a) => a.address);
  } catch (error) {
    // Bun prefixes c-ares's codes (DNS_ENOTFOUND); refusals quote them as node names them (ENOTFOUND).
    const code = errorCode(error);
    if (code) Object.assign(error as object, { code: code.replace(/^DNS_/, "") });
    throw error;
  }
}

/** SYSTEM_NETWORK resolves names with systemLookup (answers kept 30 s) and trusts the system's authorities. */
export const SYSTEM_NETWORK: Network = {
  resolve: cachedResolver((hostname) => systemLookup(hostname), RESOLVE_CACHE_MS),
};

const isAddress = (host: string) => isIPv4(host) || isIPv6(host);
const PRIVATE_SWITCH_HINT = "webhook targets must be public, or in a private network CRM_ALLOW_PRIVATE_TARGETS lists";

/** descriptorShortage is EMFILE or ENFILE when this process cannot open a file now (none free, its own or the system's), else null. */
function descriptorShortage(): string | null {
  try {
    closeSync(openSync("/dev/null", "r"));
    return null;
  } catch (error) {
    const code = errorCode(error);
    return code === "EMFILE" || code === "ENFILE" ? code : null;
  }
}

/**
 * resolveTarget resolves a URL's host once and returns the addresses to connect to, in the order
 * given, each once. Every address must be public or allowed by `privateTargets` (a name with one
 * private address could be steered there), else it throws TargetRefused; so does a name that
 * resolves to nothing. Connecting to the returned addresses, not to the name, is what keeps a name
 * that resolves differently a moment later (DNS rebinding) from reaching a private address. The
 * lookup gives up when `signal` aborts (an attempt's timeout): whoever owns the target's domain
 * owns its name server, and one that never answers would hold the attempt past its lease.
 */
export async function resolveTarget(hostname: string, resolve: Resolver, privateTargets: PrivateTargets, signal?: AbortSignal): Promise<string[]> {
  const host = hostname.replace(/^\[|\]$/g, "");
  let addresses: string[];
  if (isAddress(host)) {
    addresses = [host];
  } else {
    try {
      addresses = await (signal ? untilAborted(resolve(host), signal) : resolve(host));
    } catch (error) {
      if (signal?.aborted) throw error;
      // Without a free descriptor the lookup fails before asking anyone (c-ares reports
      // ECONNREFUSED, the hosts file reads as empty): that is this machine's fault, not the name's.
      const shortage = descriptorShortage();
      if (shortage !== null) throw Object.assign(new Error(`${shortage}: no free descriptor to look up ${host}`, { cause: error }), { code: shortage });
      throw new TargetRefused(`host ${host} could not be resolved (${errorCode(error) ?? (error as Error).message})`);
    }
    if (addresses.length === 0) throw new TargetRefused(`host ${host} could not be resolved (no address)`);
  }
  for (const address of addresses) {
    const kind = nonPublicAddressKind(address);
    if (kind && !privateTargetAllowed(address, privateTargets)) {
      // An address the client wrote is theirs to read again.
      if (address === host) throw new TargetRefused(`address ${address} is ${kind}; ${PRIVATE_SWITCH_HINT}`);
      throw new TargetRefused(`host ${host} resolves to ${anAddressOf(kind)}; ${PRIVATE_SWITCH_HINT}`, address);
    }
  }
  // A name listed on two lines of the hosts file with one address would be tried twice.
  return [...new Set(addresses)];
}

/**
 * addressesToTry returns the addresses of a name one attempt connects to, in the order their
 * connections are started: at most MAX_ADDRESSES_PER_ATTEMPT, the two families alternating from the
 * first address's, each in the order given (RFC 8305 section 4), so that a machine without IPv6
 * still reaches a name that lists its IPv6 addresses first.
 */
export function addressesToTry(addresses: string[]): string[] {
  const firstIsV6 = addresses[0] !== undefined && isIPv6(addresses[0]);
  const first = addresses.filter((address) => isIPv6(address) === firstIsV6);
  const other = addresses.filter((address) => isIPv6(address) !== firstIsV6);
  const order: string[] = [];
  for (let i = 0; i < Math.max(first.length, other.length); i++) order.push(...first.slice(i, i + 1), ...other.slice(i, i + 1));
  return order.slice(0, MAX_ADDRESSES_PER_ATTEMPT);
}

/** untilAborted settles as `work` does, or rejects with the signal's reason once it aborts (`work` is left to finish unobserved). */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(signal.reason);
    signal.addEventListener("abort", abort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener("abort", abort));
  });
}

/** PinnedTarget is where to connect for a target URL and what to tell the receiver it asked for. */
export interface PinnedTarget {
  /** the target URL with the resolved address in place of the host name */
  url: string;
  /** Host header of the original URL; null when the URL names an address already */
  host: string | null;
  /** TLS server name (SNI, and the name the certificate must carry); null for http or an address */
  serverName: string | null;
}

/** addressAsHost writes an address as a URL's host is written: an IPv6 one in brackets. */
export const addressAsHost = (address: string) => (isIPv6(address) ? `[${address}]` : address);

/** pinTarget rewrites a target URL to connect to `address` while the request still names the original host. */
export function pinTarget(target: URL, address: string): PinnedTarget {
  if (isAddress(target.hostname.replace(/^\[|\]$/g, ""))) return { url: target.href, host: null, serverName: null };
  return {
    url: `${target.protocol}//${addressAsHost(address)}${target.port ? `:${target.port}` : ""}${target.pathname}${target.search}`,
    host: target.host,
    // A name's root dot (`hooks.example.com.`) is not sent in TLS's server name (RFC 6066 section 3).
    serverName: target.protocol === "https:" ? target.hostname.replace(/\.$/, "") : null,
  };
}
