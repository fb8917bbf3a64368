import { describe, expect, test } from "bun:test";
import { Metrics } from "../../server/ops/metrics.ts";
import { recordDeliveryOutcome } from "../../server/ops/service.ts";
import { createLogger } from "../../server/shared/log.ts";
import { localFaultOf } from "../../server/webhooks/delivery.ts";
import type { DeliveryOutcome } from "../../server/webhooks/worker.ts";
import { parseExposition } from "../ops/prometheus.ts";

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

  test("an attempt not sent for want of a descriptor is no attempt in the metrics: no result, no duration, no delivery; the receiver's own error still counts", () => {
    const metrics = new Metrics();
    const outcome = (local_fault: boolean): DeliveryOutcome => ({
      delivery_id: "dlv_1",
      subscription_id: "sub_1",
      event_type: "contact.created",
      request_id: null,
      trigger: "scheduled",
      previous_status: "pending",
      status: "pending",
      late: false,
      local_fault,
      response_status: null,
      error: local_fault ? "not sent: this server is out of file descriptors (EMFILE)" : "connection failed: ECONNREFUSED",
      duration_ms: 1,
      event_age_ms: 5,
    });
    const log = createLogger("error", () => {});
    recordDeliveryOutcome(metrics, log, outcome(true));
    const counted = () => {
      const scraped = parseExposition(metrics.render([]));
      const attempts = (result: string) => scraped.value("crm_webhook_delivery_attempts_total", { result });
      return { succeeded: attempts("succeeded"), failed: attempts("failed"), error: attempts("error"), durations: scraped.value("crm_webhook_delivery_attempt_duration_seconds_count") };
    };
    expect(counted()).toEqual({ succeeded: 0, failed: 0, error: 0, durations: 0 });
    recordDeliveryOutcome(metrics, log, outcome(false));
    expect(counted()).toEqual({ succeeded: 0, failed: 0, error: 1, durations: 1 });
  });
});
