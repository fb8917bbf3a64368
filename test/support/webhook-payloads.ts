import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import { eventTypes } from "../../server/webhooks/service.ts";

// One validator per event kind, compiled once from the schemas GET /public/v1/event-types serves.
const ajv = new Ajv2020({ allErrors: true, strict: true, strictTypes: false });
addFormats(ajv);
const validators = new Map(eventTypes().map(({ type, schema }) => [type, ajv.compile(schema)]));

/**
 * payloadProblems checks a webhook request body against the event catalogue's JSON Schema for
 * its `type` and returns what is wrong, in words (empty when it validates). Every test receiver
 * runs it on every body it gets and fails its test on stop() when one did not validate.
 */
export function payloadProblems(body: string): string[] {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return [`not JSON: ${body.slice(0, 100)}`];
  }
  const type = (json as { type?: unknown } | null)?.type;
  const validate = typeof type === "string" ? validators.get(type) : undefined;
  if (!validate) return [`no event type ${JSON.stringify(type)} in the catalogue`];
  if (validate(json)) return [];
  return (validate.errors ?? []).map((e) => `${type}${e.instancePath || "/"} ${e.message ?? "is invalid"}`);
}

/** PayloadCheck collects the problems of every body a receiver got, and throws them on demand. */
export class PayloadCheck {
  private readonly problems: string[] = [];

  /** check records the problems of one body. */
  check(body: string): void {
    this.problems.push(...payloadProblems(body));
  }

  /** assertValid throws when any body checked did not validate against its event type's schema. */
  assertValid(): void {
    if (this.problems.length > 0) throw new Error(`webhook bodies that do not match GET /event-types: ${this.problems.join("; ")}`);
  }
}
