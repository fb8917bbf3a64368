import pkg from "../package.json" with { type: "json" };

/** CRM_BUILD_COMMIT is the commit a binary is built from, defined by scripts/build.ts (Bun.build's define); run from source, it is not defined. */
declare const CRM_BUILD_COMMIT: string | undefined;

/** VERSION is the service's version, from package.json (embedded in the compiled binary). */
export const VERSION: string = pkg.version;

/**
 * COMMIT tells builds of one VERSION apart: the short hash of the commit the binary was built
 * from ("-dirty" when the tree had changes, "unknown" when built outside a git checkout), or
 * "source" when run from source.
 */
export const COMMIT: string = typeof CRM_BUILD_COMMIT === "string" ? CRM_BUILD_COMMIT : "source";

/** BUILD is the version with its commit, `0.1.0 (abc1234)`: what --version prints and the refusal of a newer database names. */
export const BUILD = `${VERSION} (${COMMIT})`;
