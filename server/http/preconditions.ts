import { Elysia, t } from "elysia";
import { ProblemError, validationProblem } from "../shared/problem.ts";
import { documentAs, IdempotencyKeyHeader } from "./openapi-docs.ts";
import { versionTag, type EntityTags, type VersionCondition } from "../shared/version-condition.ts";

// One entity tag in a list, as the pattern below reads it: the comma is left out of its opaque part, as the list is split at commas first.
const LISTED_TAG = '(W/)?"[\\x21\\x23-\\x2b\\x2d-\\x7e\\x80-\\xff]*"';

/**
 * ENTITY_TAGS_PATTERN is what listedTags reads, as the OpenAPI document states it: * alone, or entity
 * tags separated by commas, empty list elements allowed around at least one tag. So a client's
 * validator refuses what the service answers 422 (an unquoted 3, an empty value).
 */
export const ENTITY_TAGS_PATTERN = `^(\\s*\\*\\s*|(\\s*,)*\\s*${LISTED_TAG}(\\s*,(\\s*${LISTED_TAG})?)*\\s*)$`;

/** conditionHeader is a precondition header's schema: the service reads its entity tags itself (notEntityTags), the document states them as ENTITY_TAGS_PATTERN. */
function conditionHeader(description: string, maxLength?: number) {
  const length = maxLength === undefined ? {} : { maxLength };
  return t.Optional(t.String({ ...length, description, ...documentAs({ type: "string", ...length, pattern: ENTITY_TAGS_PATTERN }) }));
}

/** ConditionHeaders documents the optional If-Match and If-None-Match request headers of a write to a versioned resource. */
export const ConditionHeaders = t.Object(
  {
    "if-match": conditionHeader('Write only if the stored version is this one: the ETag of your last read ("3"), several separated by commas, or * for any. Otherwise 412, and nothing changes.', 1000),
    "if-none-match": conditionHeader('Write only if the stored version is none of these: entity tags ("3", and W/"3" alike), separated by commas, or * to write only if it does not exist. Otherwise 412, and nothing changes.', 1000),
  },
  { additionalProperties: true },
);

/** IdempotentConditionHeaders documents the Idempotency-Key, If-Match and If-None-Match request headers of a POST that changes a versioned resource. */
export const IdempotentConditionHeaders = t.Object({ ...IdempotencyKeyHeader.properties, ...ConditionHeaders.properties }, { additionalProperties: true });

/** ReadConditionHeaders documents the optional If-None-Match request header of a read of one versioned resource. */
export const ReadConditionHeaders = t.Object(
  {
    // No maxLength, unlike the writes': a read that sends no ETag ignores the header, and one of an id
    // that does not exist is 404, however long it is (the request's header limit bounds it).
    "if-none-match": conditionHeader('Answer 304 Not Modified, without the body, if the stored version is one of these: entity tags ("3", and W/"3" alike), separated by commas, or * for any. Ignored by a read that sends no ETag (a contact read with include).'),
  },
  { additionalProperties: true },
);

type PreconditionHeader = "if-match" | "if-none-match";

/** notEntityTags is the 422 of a precondition header that is neither * nor a list of entity tags. */
function notEntityTags(header: PreconditionHeader) {
  return validationProblem([{ header, detail: 'must be * or entity tags such as "3" (the ETag of a read), separated by commas' }]);
}

// One entity-tag of the list (RFC 9110 section 8.8.3): strong "…" or weak W/"…".
const ENTITY_TAG = /^\s*(W\/)?"([\x21\x23-\x7e\x80-\xff]*)"\s*$/;

/** ListedTag is one entity tag of a precondition header's list: its opaque tag without the quotes, and whether it is weak. */
interface ListedTag {
  weak: boolean;
  opaque: string;
}

/**
 * listedTags reads a precondition header's value: "any" for *, else its entity tags, or null when
 * it holds no tag or a member that is not one. Empty list elements are skipped (RFC 9110 section 5.6.1.2).
 */
function listedTags(value: string): "any" | ListedTag[] | null {
  if (value.trim() === "*") return "any";
  const tags: ListedTag[] = [];
  for (const member of value.split(",").filter((member) => member.trim() !== "")) {
    const tag = ENTITY_TAG.exec(member);
    if (!tag) return null;
    tags.push({ weak: tag[1] !== undefined, opaque: tag[2]! });
  }
  return tags.length === 0 ? null : tags;
}

/**
 * entityTags reads a precondition header's value. Tags are the versions the ETag header gives;
 * one that is not a version can never match, so it stays in the list as no version at all, and
 * so does a weak tag in If-Match, which compares strongly (If-None-Match compares weakly: RFC
 * 9110 section 8.8.3.2). A value with no tag at all, or something else than tags, is refused.
 */
function entityTags(value: string, header: PreconditionHeader): EntityTags {
  const tags = listedTags(value);
  if (tags === null) throw notEntityTags(header);
  if (tags === "any") return "any";
  return tags.filter((tag) => (!tag.weak || header === "if-none-match") && /^[1-9][0-9]{0,14}$/.test(tag.opaque)).map((tag) => Number(tag.opaque));
}

/**
 * noneMatchNames tells whether a request's If-None-Match (null without one) names `etag`, a strong
 * tag with its quotes, compared weakly (a proxy that compresses the answer makes the tag weak), or
 * is *. A value that is not a list of tags names nothing.
 */
export function noneMatchNames(ifNoneMatch: string | null, etag: string): boolean {
  const tags = ifNoneMatch === null ? null : listedTags(ifNoneMatch);
  return tags === "any" || (tags !== null && tags.some((tag) => `"${tag.opaque}"` === etag));
}

/** versionCondition reads a write's If-Match and If-None-Match headers into the condition it must meet, null without either. */
export function versionCondition(headers: { [header in PreconditionHeader]?: string }): VersionCondition | null {
  const match = headers["if-match"];
  const noneMatch = headers["if-none-match"];
  if (match === undefined && noneMatch === undefined) return null;
  return {
    ...(match !== undefined ? { match: entityTags(match, "if-match") } : {}),
    ...(noneMatch !== undefined ? { noneMatch: entityTags(noneMatch, "if-none-match") } : {}),
  };
}

/** tagged sets the ETag of a response carrying one versioned resource, and returns the body. */
export function tagged<B extends { data: { version: number } }>(set: { headers: Record<string, string | number> }, body: B): B {
  set.headers.etag = versionTag(body.data.version);
  return body;
}

/**
 * taggedRead answers a read of one versioned resource: its ETag, and `body`, or no body and 304
 * when the read's If-None-Match (`ifNoneMatch`) names the version, compared weakly, or is *: the
 * client's copy is current (RFC 9110 section 13.1.2). The header is read after the resource, so
 * an id that does not exist stays 404 whatever it says (section 13.2.1).
 */
export function taggedRead<B extends { data: { version: number } }>(set: { headers: Record<string, string | number>; status?: number | string }, ifNoneMatch: string | undefined, body: B): B | undefined {
  tagged(set, body);
  if (ifNoneMatch === undefined) return body;
  const tags = entityTags(ifNoneMatch, "if-none-match");
  if (tags !== "any" && !tags.includes(body.data.version)) return body;
  set.status = 304;
  return undefined;
}

/** MemberLookups maps each path parameter naming a member to what it names (the kind its 404 names) and its lookup, which throws the 404 the write would answer when there is no such member. */
type MemberLookups = Record<string, { kind: string; lookup: (id: string) => Promise<unknown> }>;

/** tagsRefused is the 412 of a write to something with no version (`unversioned` says what) whose If-Match names entity tags. */
function tagsRefused(unversioned: string): ProblemError {
  return new ProblemError(412, "precondition-failed", `${unversioned}, so no entity tag in If-Match can match: send the request without If-Match, or with *.`);
}

/**
 * refuseEntityTags is the hook of a create (`unversioned` says why the new resource has no
 * version yet): as RFC 9110 (section 13.1.1) asks, entity tags in If-Match never match, so the
 * write is refused with 412 and not made, instead of being made unconditionally; `*` holds.
 * Synchronous, on the path of every create: Elysia awaits a hook only when it is async.
 * The mark on it makes the OpenAPI document state its If-Match and 412.
 */
export function refuseEntityTags(unversioned: string) {
  const hook = ({ request }: { request: Request }) => {
    const match = request.headers.get("if-match");
    if (match !== null && Array.isArray(versionCondition({ "if-match": match })?.match)) throw tagsRefused(unversioned);
  };
  return Object.assign(hook, { [UNVERSIONED_RESOURCES]: unversioned });
}

/**
 * refuseUnmeetableConditions is the hook of every write of a feature whose resources have no
 * version (`unversioned` says what): entity tags in If-Match are refused as by refuseEntityTags;
 * on a write to a member, If-None-Match: * (that it not exist) fails, and its entity tags,
 * matching nothing, hold (section 13.1.2). A member that does not exist stays 404 (section
 * 13.2.1): `members` looks it up, only for a write about to be refused. The mark on it makes the
 * OpenAPI document state its If-Match (a member's If-None-Match too) and 412.
 */
function refuseUnmeetableConditions(unversioned: string, members: MemberLookups) {
  const hook = async ({ request, params }: { request: Request; params?: Record<string, string | undefined> }) => {
    if (request.method === "GET" || request.method === "HEAD") return;
    const match = request.headers.get("if-match");
    const noneMatch = request.headers.get("if-none-match");
    if (match === null && noneMatch === null) return;
    const member = Object.entries(members).find(([name]) => params?.[name] !== undefined);
    // A create's target is the collection, which If-None-Match is not meant for: it always makes a new member.
    const condition = versionCondition({ "if-match": match ?? undefined, "if-none-match": member ? (noneMatch ?? undefined) : undefined });
    const tagsInMatch = Array.isArray(condition?.match);
    if (!tagsInMatch && condition?.noneMatch !== "any") return;
    if (!member) throw tagsRefused(unversioned);
    const [parameter, { kind, lookup }] = member;
    const id = params![parameter]!;
    await lookup(id);
    // Worded as a versioned member's 412 (refuseUnmetCondition), without the version it lacks.
    throw tagsInMatch ? tagsRefused(unversioned) : new ProblemError(412, "precondition-failed", `The ${kind} ${id} exists, and If-None-Match: * asks that it does not, so nothing changed.`);
  };
  return Object.assign(hook, { [UNVERSIONED_RESOURCES]: unversioned });
}

/** unversionedWrites gives every write of a feature whose resources carry no version (no ETag) the refuseUnmeetableConditions hook, with the lookups of the members its paths name. */
export function unversionedWrites(resources: string, members: MemberLookups) {
  return new Elysia({ name: `unversioned-writes:${resources}` }).onBeforeHandle({ as: "scoped" }, refuseUnmeetableConditions(`${resources} carry no version (their reads have no ETag)`, members));
}

/** UNVERSIONED_RESOURCES carries, on a refuseEntityTags or refuseUnmeetableConditions hook, what the write has no version of: the OpenAPI document then states its If-Match and 412. */
export const UNVERSIONED_RESOURCES = Symbol("unversioned resources");
