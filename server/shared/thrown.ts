// Anything may be thrown (null and strings too), so a catch has an unknown in hand: these read the
// fields the runtime's and the database clients' errors carry, typed, in one place.

/** stringField is the named field of a thrown value when it is a string, else undefined. */
function stringField(error: unknown, name: "code" | "errno"): string | undefined {
  const value = typeof error === "object" && error !== null ? (error as Record<string, unknown>)[name] : undefined;
  return typeof value === "string" ? value : undefined;
}

/**
 * errorCode is the `code` a thrown value carries: a system call's (ENOENT, EPIPE), Bun's own
 * (ERR_POSTGRES_CONNECTION_REFUSED, ERR_TLS_CERT_ALTNAME_INVALID) or SQLite's extended result code
 * (SQLITE_BUSY_SNAPSHOT); undefined for a value without one.
 */
export function errorCode(error: unknown): string | undefined {
  return stringField(error, "code");
}

/**
 * sqlStateOf is the SQLSTATE of an error the PostgreSQL server sent (Bun's SQL client gives it as
 * the string `errno`: 40001, 55P03); undefined for any other error, SQLite's too (its errno is a number).
 */
export function sqlStateOf(error: unknown): string | undefined {
  return stringField(error, "errno");
}
