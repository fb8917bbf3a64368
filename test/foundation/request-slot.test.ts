import { describe, expect, test } from "bun:test";
import { requestSlot } from "../../server/http/request-slot.ts";

describe("requestSlot", () => {
  test("keeps one value per request and per slot, until deleted", () => {
    const token = requestSlot<string>("token");
    const started = requestSlot<number>("started");
    const first = new Request("http://localhost/a");
    const second = new Request("http://localhost/b");
    token.set(first, "tok_first");
    started.set(first, 1);
    token.set(second, "tok_second");
    expect([token.get(first), started.get(first), token.get(second), started.get(second)]).toEqual(["tok_first", 1, "tok_second", undefined]);
    token.delete(first);
    expect([token.get(first), started.get(first), token.get(second)]).toEqual([undefined, 1, "tok_second"]);
  });

  test("two slots of the same name are apart, and neither shows among the request's properties", () => {
    const one = requestSlot<string>("held");
    const other = requestSlot<string>("held");
    const request = new Request("http://localhost/", { headers: { "x-a": "1" } });
    one.set(request, "one");
    other.set(request, "other");
    expect([one.get(request), other.get(request)]).toEqual(["one", "other"]);
    expect(Object.keys(request)).toEqual([]);
    expect(JSON.stringify(Object.fromEntries(request.headers))).toBe('{"x-a":"1"}');
  });
});
