import { describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { parseRetryAfter, signPayload } from "../../server/webhooks/delivery.ts";
import { RETRY_AFTER_CAP_MS } from "../../server/limits/limits.ts";
import { nonPublicAddressKind } from "../../server/webhooks/targets.ts";
import { nextRetryDelay } from "../../server/webhooks/worker.ts";

describe("address rules", () => {
  test("loopback, private, link-local, metadata, unspecified, mapped and reserved addresses are named", () => {
    const cases: [string, string][] = [
      ["127.0.0.1", "loopback"],
      ["127.255.0.9", "loopback"],
      ["10.0.0.1", "private"],
      ["172.16.0.1", "private"],
      ["172.31.255.255", "private"],
      ["192.168.0.1", "private"],
      ["169.254.169.254", "link-local (cloud metadata)"],
      ["100.100.100.200", "shared (carrier-grade NAT, cloud metadata)"],
      ["0.0.0.0", "unspecified"],
      ["224.0.0.1", "multicast"],
      ["255.255.255.255", "reserved"],
      ["::", "unspecified"],
      ["::1", "loopback"],
      ["[::1]", "loopback"],
      ["::ffff:127.0.0.1", "IPv4-mapped IPv6"],
      ["::ffff:8.8.8.8", "IPv4-mapped IPv6"],
      ["fe80::1%eth0", "link-local"],
      ["fd00:ec2::254", "private (unique local)"],
      ["fc00::1", "private (unique local)"],
      ["ff02::1", "multicast"],
      ["64:ff9b::a00:1", "private"],
      ["2002:7f00:1::", "loopback"],
      ["2001:db8::1", "documentation"],
    ];
    expect(cases.map(([address]) => [address, nonPublicAddressKind(address)])).toEqual(cases);
  });

  test("IPv6 special-purpose ranges where no ordinary receiver lives are named", () => {
    const cases: [string, string][] = [
      ["3fff::1", "documentation"],
      ["3fff:fff:ffff::1", "documentation"],
      ["2001:2::1", "reserved (benchmarking)"],
      ["2001:2:0:ffff::1", "reserved (benchmarking)"],
      ["2001:10::1", "reserved (ORCHID)"],
      ["2001:1f::1", "reserved (ORCHID)"],
      ["2001:20::1", "reserved (ORCHIDv2)"],
      ["2001:2f::1", "reserved (ORCHIDv2)"],
      ["5f00::1", "reserved (segment routing)"],
      ["100:0:0:1::1", "reserved (dummy prefix)"],
      ["64:ff9b:1::a00:1", "private (NAT64 local use)"],
    ];
    expect(cases.map(([address]) => [address, nonPublicAddressKind(address)])).toEqual(cases);
  });

  test("public addresses pass", () => {
    // 3fff:1000::1, 2001:3::1 (AMT) and 2001:30::1 (drone remote ID) lie just beside refused ranges.
    for (const address of ["8.8.8.8", "1.1.1.1", "172.32.0.1", "172.15.255.255", "100.128.0.1", "2606:4700:4700::1111", "64:ff9b::808:808", "2002:808:808::", "3fff:1000::1", "2001:3::1", "2001:30::1"]) {
      expect([address, nonPublicAddressKind(address)]).toEqual([address, null]);
    }
  });
});

describe("retry rules", () => {
  test("the schedule applies with ±20% jitter and ends after its last delay", () => {
    const schedule = [5, 300];
    expect(nextRetryDelay(schedule, 1, null, 0)).toBe(4000);
    expect(nextRetryDelay(schedule, 1, null, 1)).toBe(6000);
    expect(nextRetryDelay(schedule, 2, null, 0.5)).toBe(300_000);
    expect(nextRetryDelay(schedule, 3, null, 0.5)).toBeNull();
  });

  test("Retry-After is honoured when longer than the schedule, up to a cap", () => {
    expect(nextRetryDelay([5], 1, 60_000, 0.5)).toBe(60_000);
    expect(nextRetryDelay([5], 1, 1000, 0.5)).toBe(5000);
    expect(nextRetryDelay([5], 1, 7 * 24 * 3600 * 1000, 0.5)).toBe(RETRY_AFTER_CAP_MS);
    expect(nextRetryDelay([], 1, 60_000, 0.5)).toBeNull();
  });

  test("Retry-After is read as seconds or an HTTP date", () => {
    const now = Date.parse("2026-11-21T10:00:00Z");
    expect(parseRetryAfter("120", now)).toBe(120_000);
    expect(parseRetryAfter("Sat, 21 Nov 2026 10:02:00 GMT", now)).toBe(120_000);
    expect(parseRetryAfter("Sat, 21 Nov 2026 09:00:00 GMT", now)).toBe(0);
    expect(parseRetryAfter("soon", now)).toBeNull();
    expect(parseRetryAfter("-5", now)).toBeNull();
    expect(parseRetryAfter(null, now)).toBeNull();
  });

  test("an HTTP date is one of its three forms (RFC 9110), never any text Date.parse finds a date in", () => {
    const now = Date.parse("2026-11-21T10:00:00Z");
    expect(parseRetryAfter("Saturday, 21-Nov-26 10:02:00 GMT", now)).toBe(120_000);
    expect(parseRetryAfter("Sat Nov 21 10:02:00 2026", now)).toBe(120_000);
    expect(parseRetryAfter("Sat Nov  1 10:00:00 2026", now)).toBe(0);
    for (const junk of ["abc 2044", "Sat, 21 Nov 2026 10:02:00", "2026-11-21T10:02:00Z", "Sat, 21 Nov 2026 10:02:00 GMT garbage", "1e3", "30.5"]) {
      expect([junk, parseRetryAfter(junk, now)]).toEqual([junk, null]);
    }
  });
});

describe("signatures", () => {
  test("signPayload matches the standardwebhooks reference implementation", () => {
    const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const body = JSON.stringify({ type: "contact.created", timestamp: "2026-11-21T10:00:00.000Z", data: { id: "con_1" } });
    const at = new Date(1795248000 * 1000);
    expect(signPayload(secret, "dlv_1", 1795248000, body)).toBe(new Webhook(secret).sign("dlv_1", at, body));
  });
});
