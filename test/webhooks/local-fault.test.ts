import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { localFaultOf } from "../../server/webhooks/delivery.ts";

/** failure is an error as Bun's fetch and sockets throw them: a message and a code. */
const failure = (code: string) => Object.assign(new Error(`${code}: Was there a typo in the url or port?`), { code });

/** withoutDescriptors runs a fixture under a low open-file limit (on SQLite) and returns what it printed, as JSON. */
async function withoutDescriptors(fixture: string, ...args: string[]): Promise<unknown> {
  const env: Record<string, string | undefined> = { ...process.env, CRM_TEST_BACKEND: undefined };
  const proc = Bun.spawn(["bash", "-c", 'ulimit -n 512 && exec "$0" "$@"', process.execPath, join(import.meta.dir, "fixtures", fixture), ...args], { stdout: "pipe", stderr: "pipe", env });
  const [out, err] = [await new Response(proc.stdout).text(), await new Response(proc.stderr).text()];
  expect({ code: await proc.exited, err }).toEqual({ code: 0, err: "" });
  return JSON.parse(out);
}

/** NOT_SENT is the error of an attempt that found no free descriptor. */
const NOT_SENT = (code: string) => `not sent: this server is out of file descriptors (${code}); the receiver was not contacted, and the delivery is tried again shortly without spending an attempt`;

describe("webhook attempts: failures of this machine", () => {
  test("EMFILE and ENFILE, on fetch's connection or on one raced to another address, are this server's fault; the receiver's failures are not", () => {
    expect(
      [
        localFaultOf(failure("EMFILE"), []),
        localFaultOf(failure("ENFILE"), []),
        localFaultOf(failure("ECONNREFUSED"), ["ECONNREFUSED", "EMFILE"]),
        localFaultOf(failure("ECONNREFUSED"), ["ECONNREFUSED"]),
        localFaultOf(failure("ECONNRESET"), []),
        localFaultOf(new Error("timed out"), []),
      ],
    ).toEqual(["EMFILE", "ENFILE", "EMFILE", null, null, null]);
  });

  test("with no free descriptor, an attempt at a named target is this server's fault as one at an address is: the lookup's failure (c-ares reports ECONNREFUSED) is not the target's name failing to resolve", async () => {
    const expected = { local_fault: "EMFILE", unanswered: false, refused_address: null, error: NOT_SENT("EMFILE") };
    const attempt = (target: string) => withoutDescriptors("attempt-without-descriptors.ts", target);
    expect([await attempt("http://127.0.0.1:9/hook"), await attempt("http://receiver.invalid/hook")]).toEqual([expected, expected]);
  });

  test("attempts turned back for want of descriptors are neither logged nor counted as attempts: one error line says so (at most one a minute however many), crm_webhook_delivery_attempts_total stays 0", async () => {
    expect(await withoutDescriptors("loop-without-descriptors.ts")).toEqual({
      logged: [
        {
          level: "error",
          msg: "webhook attempts not sent: this server is out of file descriptors (EMFILE); their deliveries are tried again every 5 s without spending an attempt until descriptors are free: raise the open-file limit (see Connections in README)",
        },
      ],
      attempts_counted: ['crm_webhook_delivery_attempts_total{result="succeeded"} 0', 'crm_webhook_delivery_attempts_total{result="failed"} 0', 'crm_webhook_delivery_attempts_total{result="error"} 0'],
      deliveries: [
        { status: "pending", attempts: 0 },
        { status: "pending", attempts: 0 },
      ],
    });
  });

  test("a subscription created while no descriptor is free is answered 503 out-of-descriptors with Retry-After, not a 500, and logged once a minute, not once a request", async () => {
    const answer = {
      status: 503,
      retry_after: "5",
      body: {
        type: "urn:crm:problem:out-of-descriptors",
        title: "Service Unavailable",
        status: 503,
        detail: "The server has no free file descriptor just now (EMFILE: its open-file limit is reached), so it could not serve this request. Retry shortly; a change retried with the same Idempotency-Key is made once.",
      },
    };
    expect(await withoutDescriptors("subscribe-without-descriptors.ts")).toEqual({
      answers: [answer, answer],
      logged: [
        {
          level: "error",
          msg: "requests refused: this server is out of file descriptors (EMFILE); raise the open-file limit (see Connections in README)",
          method: "POST",
          path: "/public/v1/webhook-subscriptions",
        },
      ],
    });
  });
});
