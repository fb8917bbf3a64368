import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { localFaultOf } from "../../server/webhooks/delivery.ts";

/** failure is an error as Bun's fetch and sockets throw them: a message and a code. */
const failure = (code: string) => Object.assign(new Error(`${code}: Was there a typo in the url or port?`), { code });

/** FIXTURE sends one attempt with every descriptor of its process taken. */
const FIXTURE = join(import.meta.dir, "fixtures", "attempt-without-descriptors.ts");

/** attemptWithoutDescriptors is what FIXTURE's attempt at `target` came to, run under a low open-file limit. */
async function attemptWithoutDescriptors(target: string): Promise<unknown> {
  const proc = Bun.spawn(["bash", "-c", 'ulimit -n 256 && exec "$0" "$@"', process.execPath, FIXTURE, target], { stdout: "pipe", stderr: "pipe" });
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
    const expected = { local_fault: true, unanswered: false, refused_address: null, error: NOT_SENT("EMFILE") };
    expect([await attemptWithoutDescriptors("http://127.0.0.1:9/hook"), await attemptWithoutDescriptors("http://receiver.invalid/hook")]).toEqual([expected, expected]);
  });
});
