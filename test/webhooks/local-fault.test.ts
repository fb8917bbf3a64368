import { describe, expect, test } from "bun:test";
import { localFaultOf } from "../../server/webhooks/delivery.ts";

/** failure is an error as Bun's fetch and sockets throw them: a message and a code. */
const failure = (code: string) => Object.assign(new Error(`${code}: Was there a typo in the url or port?`), { code });

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
});
