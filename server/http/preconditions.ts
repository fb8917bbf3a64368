import { Elysia, t } from "elysia";
import { ProblemError, validationProblem } from "../shared/problem.ts";
import { IdempotencyKeyHeader } from "./openapi-docs.ts";
import { versionTag, type VersionCondition } from "../shared/version-condition.ts";

/** IfMatchHeader documents the optional If-Match request header of a write to a versioned resource. */
export const IfMatchHeader = t.Object(
  {
    "if-match": t.Optional(
      t.String({
        maxLength: 1000,
        description: 'Write only if the stored version is this one: the ETag of your last read ("3"), several separated by commas, or * for any. Otherwise 412, and nothing changes.',
      }),
    ),
  },
  { additionalProperties: true },
);

/** IdempotentIfMatchHeader documents the Idempotency-Key and If-Match request headers of a POST that changes a versioned resource. */
export const IdempotentIfMatchHeader = t.Object({ ...IdempotencyKeyHeader.properties, ...IfMatchHeader.properties }, { additionalProperties: true });

/** notEntityTags is the 422 of an If-Match that is neither * nor a list of entity tags. */
function notEntityTags() {
  return validationProblem([{ header: "if-match", detail: 'must be * or entity tags such as "3" (the ETag of a read), separated by commas' }]);
}

// One entity-tag of the list (RFC 9110 section 8.8.3): strong "…" or weak W/"…".
const ENTITY_TAG = /^\s*(W\/)?"([\x21\x23-\x7e\x80-\xff]*)"\s*$/;

/**
 * versionCondition reads an If-Match header into the condition the write must meet, null without
 * one. Tags are the versions the ETag header gives; a weak tag or one that is not a version can
 * never match (If-Match compares strongly), so it stays in the list as no version at all. Empty
 * list elements are skipped (RFC 9110 section 5.6.1.2); a list with no tag at all is refused.
 */
export function versionCondition(header: string | undefined): VersionCondition | null {
  if (header === undefined) return null;
  if (header.trim() === "*") return { anyVersion: true };
  const members = header.split(",").filter((member) => member.trim() !== "");
  const versions: number[] = [];
  if (members.length === 0) throw notEntityTags();
  for (const member of members) {
    const tag = ENTITY_TAG.exec(member);
    if (!tag) throw notEntityTags();
    if (!tag[1] && /^[1-9][0-9]{0,14}$/.test(tag[2]!)) versions.push(Number(tag[2]));
  }
  return { versions };
}

/** tagged sets the ETag of a response carrying one versioned resource, and returns the body. */
export function tagged<B extends { data: { version: number } }>(set: { headers: Record<string, string | number> }, body: B): B {
  set.headers.etag = versionTag(body.data.version);
  return body;
}

/** MemberLookups maps each path parameter naming a member to its lookup, which throws the 404 the write would answer when there is no such member. */
export type MemberLookups = Record<string, (id: string) => Promise<unknown>>;

/**
 * refuseEntityTags is the hook of a write to something with no version (`unversioned` says what,
 * and why no tag can match): as RFC 9110 (section 13.1.1) asks, entity tags in If-Match never
 * match, so the write is refused with 412 and not made, instead of being made unconditionally;
 * `*` (it exists) holds. A write to a member that does not exist stays 404 (RFC 9110 section
 * 13.2.1): `members` looks it up, only for a write about to be refused. The mark on it makes the
 * OpenAPI document state its If-Match and 412.
 */
export function refuseEntityTags(unversioned: string, members: MemberLookups = {}) {
  const hook = async ({ request, params }: { request: Request; params?: Record<string, string | undefined> }) => {
    const header = request.headers.get("if-match");
    if (header === null || request.method === "GET" || request.method === "HEAD") return;
    const condition = versionCondition(header);
    if (condition && "versions" in condition) {
      for (const [name, lookUp] of Object.entries(members)) if (params?.[name] !== undefined) await lookUp(params[name]);
      throw new ProblemError(412, "precondition-failed", `${unversioned}, so no entity tag in If-Match can match: send the request without If-Match, or with *.`);
    }
  };
  return Object.assign(hook, { [UNVERSIONED_RESOURCES]: unversioned });
}

/** unversionedWrites gives every write of a feature whose resources carry no version (no ETag) the refuseEntityTags hook, with the lookups of the members its paths name. */
export function unversionedWrites(resources: string, members: MemberLookups) {
  return new Elysia({ name: `unversioned-writes:${resources}` }).onBeforeHandle({ as: "scoped" }, refuseEntityTags(`${resources} carry no version (their reads have no ETag)`, members));
}

/** UNVERSIONED_RESOURCES carries, on a refuseEntityTags hook, what the write has no version of: the OpenAPI document then states its If-Match and 412. */
export const UNVERSIONED_RESOURCES = Symbol("unversioned resources");
