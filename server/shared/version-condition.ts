import { ProblemError } from "./problem.ts";

/** EntityTags is a precondition's list: "any" (`*`: the resource exists) or the versions its tags name. */
export type EntityTags = "any" | number[];

/**
 * VersionCondition is what a conditional write asks of the stored version: If-Match's, that it is
 * one of `match` (or, "any", that the resource exists), and If-None-Match's, that it is none of
 * `noneMatch` (or, "any", that the resource does not exist). An absent header asks nothing.
 */
export interface VersionCondition {
  match?: EntityTags;
  noneMatch?: EntityTags;
}

/** versionTag is the ETag of a resource at a version: the version, quoted. */
export function versionTag(version: number): string {
  return `"${version}"`;
}

/**
 * refuseUnmetCondition throws 412 when a write's condition does not hold for the version stored
 * now; it is called inside the write, so no other write can come between the check and the change.
 * If-Match is evaluated before If-None-Match (RFC 9110 section 13.2.2).
 */
export function refuseUnmetCondition(condition: VersionCondition | null, kind: string, id: string, version: number): void {
  const match = condition?.match ?? "any";
  const noneMatch = condition?.noneMatch ?? [];
  let detail: string;
  if (match !== "any" && !match.includes(version)) {
    detail = `The ${kind} ${id} is at version ${version}, not ${match.join(" or ") || "a version If-Match names"}: it changed since you read it. Read it again, apply your change to what it is now, and send that.`;
  } else if (noneMatch === "any") {
    detail = `The ${kind} ${id} exists (at version ${version}), and If-None-Match: * asks that it does not, so nothing changed.`;
  } else if (noneMatch.includes(version)) {
    detail = `The ${kind} ${id} is at version ${version}, which If-None-Match names, so nothing changed.`;
  } else {
    return;
  }
  throw new ProblemError(412, "precondition-failed", detail, undefined, { etag: versionTag(version) }, { current_version: version });
}
