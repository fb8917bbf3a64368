import { ProblemError } from "./problem.ts";

/**
 * VersionCondition is what a conditional write asks of the stored version: that the resource
 * exists at all (If-Match: *), or that its version is one of those given.
 */
export type VersionCondition = { anyVersion: true } | { versions: number[] };

/** versionTag is the ETag of a resource at a version: the version, quoted. */
export function versionTag(version: number): string {
  return `"${version}"`;
}

/**
 * refuseUnmetCondition throws 412 when a write's condition does not hold for the version stored
 * now; it is called inside the write, so no other write can come between the check and the change.
 */
export function refuseUnmetCondition(condition: VersionCondition | null, kind: string, id: string, version: number): void {
  if (!condition || "anyVersion" in condition || condition.versions.includes(version)) return;
  throw new ProblemError(
    412,
    "precondition-failed",
    `The ${kind} ${id} is at version ${version}, not ${condition.versions.join(" or ") || "a version If-Match names"}: it changed since you read it. Read it again, apply your change to what it is now, and send that.`,
    undefined,
    { etag: versionTag(version) },
    { current_version: version },
  );
}
