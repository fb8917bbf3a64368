import pkg from "../package.json" with { type: "json" };

/** VERSION is the service's version, from package.json (embedded in the compiled binary). */
export const VERSION: string = pkg.version;
