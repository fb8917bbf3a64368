import { SQL } from "bun";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { runCli, SOURCE, spawnServer, tempDir, waitUntil } from "../ops/support.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";
import { POSTGRES_MIGRATIONS, migratePostgres } from "../../server/db/postgres-migrations.ts";
import { openPostgres, WRITE_LOCK } from "../../server/db/postgres.ts";

/** SERVICE_TABLES is how many tables the service's migrations make (32 since 0034 added the tombstones' pruned horizons). */
const SERVICE_TABLES = 32;

// PostgreSQL configured the way DBAs configure it: a database URL written by hand, a database or
// role set up otherwise than the README's createdb line, through the real command line.

let database: TestDatabase;
/** admin is the superuser on the test server, to create the databases and roles of a test */
let admin: SQL;
let dir: string;
let keyFile: string;

beforeAll(async () => {
  database = await createTestDatabase();
  admin = new SQL({ url: database.url, max: 1 });
  dir = tempDir("pg-configuration");
  keyFile = writeSecretsKeyFile(join(dir, "secrets.key"));
}, 60_000);

afterAll(async () => {
  await admin?.close();
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

/** RoleDatabase is a database owned by a login role of its own (the test server trusts every login: no password). */
interface RoleDatabase {
  role: string;
  /** url connects as the role */
  url: string;
  /** admin is the superuser on this database */
  admin: SQL;
}

/** withRoleDatabase runs `work` on a new role and a database it owns (`owned`, else the superuser does), then drops both. */
async function withRoleDatabase(label: string, work: (target: RoleDatabase) => Promise<void>, { owned = true }: { owned?: boolean } = {}): Promise<void> {
  const name = `${database.name}_${label}`;
  const role = `crm_${process.pid}_${label}`;
  await admin.unsafe(`CREATE ROLE "${role}" LOGIN`);
  await admin.unsafe(`CREATE DATABASE "${name}"${owned ? ` OWNER "${role}"` : ""}`);
  const there = new SQL({ url: database.url.replace(database.name, name), max: 1 });
  try {
    await work({ role, url: database.url.replace(`postgres@127.0.0.1:`, `${role}@127.0.0.1:`).replace(database.name, name), admin: there });
  } finally {
    await there.close();
    await admin.unsafe(`DROP DATABASE "${name}" WITH (FORCE)`);
    await admin.unsafe(`DROP ROLE "${role}"`);
  }
}

/** serve starts `crm serve` on the database at `url`, with `args` added. */
function serve(url: string, args: string[] = []) {
  return spawnServer([...SOURCE, "serve", "--port", "0", "--secrets-key-file", keyFile, "--log-level", "error", ...args], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: url },
  });
}

/** contactNames lists the first names of the contacts an instance serves to `token`. */
async function contactNames(server: { url: string }, token: string): Promise<{ status: number; names: string[] }> {
  const response = await fetch(`${server.url}/public/v1/contacts`, { headers: { authorization: `Bearer ${token}` } });
  const body = await response.json();
  return { status: response.status, names: response.ok ? body.data.map((c: { first_name: string }) => c.first_name) : body.detail };
}

/** crm runs the command line from source in an empty working directory, on the database at `url`. */
function crm(url: string, args: string[]) {
  return runCli([...SOURCE, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: url } });
}

/** started runs the command line from source in the background, on the database at `url`, and collects its answer. */
function started(url: string, args: string[]) {
  const proc = Bun.spawn([...SOURCE, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: url }, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  return (async () => ({ exitCode: await proc.exited, stdout: await new Response(proc.stdout).text(), stderr: await new Response(proc.stderr).text() }))();
}

/** tokenNames lists the names of the tokens `crm token list` shows with `args`, or its refusal. */
function tokenNames(url: string, args: string[] = []): string[] | { exitCode: number; stderr: string } {
  const listed = crm(url, ["token", "list", ...args]);
  return listed.exitCode === 0 ? listed.stdout.trimEnd().split("\n").map((line) => line.split("  ")[2]!) : { exitCode: listed.exitCode, stderr: listed.stderr };
}

/** tablesByOwner counts the tables `role` owns in each schema of the database `there` connects to. */
function tablesByOwner(there: SQL, role: string) {
  return there`SELECT schemaname, count(*)::int AS tables FROM pg_tables WHERE tableowner = ${role} GROUP BY schemaname ORDER BY schemaname`;
}

describe("postgres configuration: the database URL", () => {
  test("a password with a % that does not start an escape stops start-up with one line naming the setting, without the password", () => {
    const url = database.url.replace("postgres@", "crm:secret%zz@");
    for (const command of [["token", "list"], ["serve", "--port", "0", "--secrets-key-file", keyFile]]) {
      expect({ command, ...crm(url, command) }).toEqual({
        command,
        exitCode: 2,
        stdout: "",
        stderr: `crm: cannot use the PostgreSQL database at ${url.replace("secret%zz", "***")} (--database-url, CRM_DATABASE_URL): the user name or password is not percent-encoded: write each character of them other than letters, digits and -._~ as %XX (a % as %25)\n`,
      });
    }
  });

  test("an sslmode Bun's client does not know stops start-up with one line naming the setting", () => {
    expect(crm(`${database.url}?sslmode=bogus`, ["token", "list"])).toEqual({
      exitCode: 2,
      stdout: "",
      stderr: `crm: cannot use the PostgreSQL database at ${database.url}?sslmode=bogus (--database-url, CRM_DATABASE_URL): The argument 'sslmode' must be one of: disable, allow, prefer, require, verify-ca, verify-full. Received 'bogus' (ERR_INVALID_ARG_VALUE)\n`,
    });
  });
});

describe("postgres configuration: the database", () => {
  test("a database whose encoding is not UTF8 is refused at start in one line naming the encoding", async () => {
    const name = `${database.name}_latin1`;
    await admin.unsafe(`CREATE DATABASE "${name}" ENCODING 'LATIN1' LOCALE 'C' TEMPLATE template0`);
    try {
      const url = database.url.replace(database.name, name);
      const refusal = `crm: cannot use the PostgreSQL database at ${url} (--database-url, CRM_DATABASE_URL): its encoding is LATIN1, and the service needs UTF8: create the database with createdb --encoding=UTF8 --locale=C.UTF-8 --template=template0\n`;
      for (const command of [["migrate"], ["serve", "--port", "0", "--secrets-key-file", keyFile]]) {
        expect({ command, ...crm(url, command) }).toEqual({ command, exitCode: 2, stdout: "", stderr: refusal });
      }
    } finally {
      await admin.unsafe(`DROP DATABASE "${name}" WITH (FORCE)`);
    }
  });
});

describe("postgres configuration: the schema", () => {
  test("a schema named like the role made after the first start, or another search_path for the role, moves nothing: a running instance and the next one serve the same data", async () => {
    await withRoleDatabase("late", async ({ role, url, admin: there }) => {
      const first = await serve(url);
      try {
        const token = crm(url, ["token", "create", "--name", "first"]).stdout.trim();
        const created = await fetch(`${first.url}/public/v1/contacts`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body: JSON.stringify({ first_name: "Ada" }),
        });
        expect(created.status).toBe(201);
        await there.unsafe(`CREATE SCHEMA "${role}" AUTHORIZATION "${role}"`);
        expect(await contactNames(first, token)).toEqual({ status: 200, names: ["Ada"] });
        const second = await serve(url);
        try {
          expect(await contactNames(second, token)).toEqual({ status: 200, names: ["Ada"] });
          expect(await contactNames(first, token)).toEqual({ status: 200, names: ["Ada"] });
        } finally {
          expect((await second.stopWith("SIGTERM")).exitCode).toBe(0);
        }
        await there.unsafe(`CREATE SCHEMA app AUTHORIZATION "${role}"`);
        await there.unsafe(`ALTER ROLE "${role}" SET search_path = app`);
        const third = await serve(url);
        try {
          expect(await contactNames(third, token)).toEqual({ status: 200, names: ["Ada"] });
        } finally {
          expect((await third.stopWith("SIGTERM")).exitCode).toBe(0);
        }
        expect(await tablesByOwner(there, role)).toEqual([{ schemaname: "public", tables: SERVICE_TABLES }]);
      } finally {
        expect((await first.stopWith("SIGTERM")).exitCode).toBe(0);
      }
    });
  });

  test("--database-schema names the schema of the tables; a start that finds them in another schema, or no such schema, is refused in one line", async () => {
    await withRoleDatabase("own", async ({ role, url, admin: there }) => {
      await there.unsafe(`CREATE SCHEMA "${role}" AUTHORIZATION "${role}"`);
      expect(crm(url, ["token", "create", "--name", "own", "--database-schema", role]).exitCode).toBe(0);
      expect(await tablesByOwner(there, role)).toEqual([{ schemaname: role, tables: SERVICE_TABLES }]);
      expect(crm(url, ["token", "list", "--database-schema", role])).toMatchObject({ exitCode: 0, stderr: "" });
      const prefix = `crm: cannot use the PostgreSQL database at ${url} (--database-url, CRM_DATABASE_URL): `;
      for (const command of [["token", "list"], ["serve", "--port", "0", "--secrets-key-file", keyFile]]) {
        expect({ command, ...crm(url, command) }).toEqual({
          command,
          exitCode: 2,
          stdout: "",
          stderr: `${prefix}the service's tables are in schema "${role}", not in "public" that --database-schema (CRM_DATABASE_SCHEMA) names: set it to ${role}\n`,
        });
      }
      expect(crm(url, ["token", "list", "--database-schema", "nowhere"])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `${prefix}it has no schema "nowhere" (--database-schema, CRM_DATABASE_SCHEMA): create it (CREATE SCHEMA ... AUTHORIZATION the service's role), or name the schema that holds the service's tables\n`,
      });
      expect(await tablesByOwner(there, role)).toEqual([{ schemaname: role, tables: SERVICE_TABLES }]);
    });
  });
  test("another tool's schema_migrations in public is not taken for the service's: --database-schema crm makes the tables in crm, and public is refused in one line naming the table", async () => {
    await withRoleDatabase("tool", async ({ role, url, admin: there }) => {
      // What Rails, golang-migrate and dbmate create.
      await there.unsafe(`CREATE TABLE public.schema_migrations (version varchar PRIMARY KEY)`);
      await there.unsafe(`INSERT INTO public.schema_migrations VALUES ('20240101000000')`);
      await there.unsafe(`CREATE SCHEMA crm AUTHORIZATION "${role}"`);
      const prefix = `crm: cannot use the PostgreSQL database at ${url} (--database-url, CRM_DATABASE_URL): `;
      expect(crm(url, ["token", "list"])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `${prefix}schema "public" holds a table schema_migrations that is not the service's (another tool's migrations?): set --database-schema (CRM_DATABASE_SCHEMA) to a schema of the service's own (CREATE SCHEMA ... AUTHORIZATION the service's role)\n`,
      });
      expect(crm(url, ["migrate", "--database-schema", "crm"])).toMatchObject({ exitCode: 0, stderr: "" });
      expect(await tablesByOwner(there, role)).toEqual([{ schemaname: "crm", tables: SERVICE_TABLES }]);
      expect(crm(url, ["token", "create", "--name", "crm", "--database-schema", "crm"]).exitCode).toBe(0);
      expect(tokenNames(url, ["--database-schema", "crm"])).toEqual(["crm"]);
      expect(tokenNames(url)).toEqual({
        exitCode: 2,
        stderr: `${prefix}the service's tables are in schema "crm", not in "public" that --database-schema (CRM_DATABASE_SCHEMA) names: set it to crm\n`,
      });
      expect(await there`SELECT version FROM public.schema_migrations`).toEqual([{ version: "20240101000000" }]);
    });
  });

  test("a start or command without --database-schema on a database kept in schema crm, the extensions there too, is refused with migrations pending or not, and makes nothing in public", async () => {
    await withRoleDatabase("kept", async ({ role, url, admin: there }) => {
      await there.unsafe(`CREATE SCHEMA crm AUTHORIZATION "${role}"`);
      // Migrated up to 0024 in crm, as an older crm given --database-schema crm would: the upgrade's migrations are pending.
      const older = await openPostgres(url, 1, { databaseSchema: "crm" });
      await migratePostgres(older, POSTGRES_MIGRATIONS.filter((m) => m.version <= 24));
      await older.close();
      expect(await there`SELECT e.extname::text AS name, n.nspname::text AS schema FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname <> 'plpgsql' ORDER BY 1`).toEqual([
        { name: "citext", schema: "crm" },
        { name: "pg_trgm", schema: "crm" },
      ]);
      const refusal = `crm: cannot use the PostgreSQL database at ${url} (--database-url, CRM_DATABASE_URL): the service's tables are in schema "crm", not in "public" that --database-schema (CRM_DATABASE_SCHEMA) names: set it to crm\n`;
      for (const command of [["token", "list"], ["serve", "--port", "0", "--secrets-key-file", keyFile]]) {
        expect({ command, ...crm(url, command) }).toEqual({ command, exitCode: 2, stdout: "", stderr: refusal });
      }
      expect(await there`SELECT tablename FROM pg_tables WHERE schemaname = 'public'`).toEqual([]);
      const applied = POSTGRES_MIGRATIONS.filter((m) => m.version > 24).map((m) => m.name);
      expect(crm(url, ["token", "list", "--database-schema", "crm"])).toEqual({ exitCode: 0, stdout: "", stderr: `crm: applied ${applied.join(", ")}\n` });
      expect(await there`SELECT count(*)::int AS applied FROM crm.schema_migrations`).toEqual([{ applied: POSTGRES_MIGRATIONS.length }]);
      expect(crm(url, ["token", "list"])).toEqual({ exitCode: 2, stdout: "", stderr: refusal });
      expect(await tablesByOwner(there, role)).toEqual([{ schemaname: "crm", tables: SERVICE_TABLES }]);
    });
  });

  test("tables in two schemas, public from the first start and one named like the role that an older crm made later, are refused without --database-schema in one line naming both; the setting chooses", async () => {
    await withRoleDatabase("split", async ({ role, url, admin: there }) => {
      expect(crm(url, ["token", "create", "--name", "before-schema"]).exitCode).toBe(0);
      await there.unsafe(`CREATE SCHEMA "${role}" AUTHORIZATION "${role}"`);
      // An older crm, whose sessions kept the role's search_path ("$user", public), made every table
      // again there: it looked for no tables elsewhere, so its migrations are run here by hand.
      const older = new SQL({ url, max: 1 });
      await older.begin(async (tx) => {
        await tx`CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL)`;
        for (const migration of POSTGRES_MIGRATIONS) {
          await tx.unsafe(migration.sql);
          await tx`INSERT INTO schema_migrations VALUES (${migration.version}, ${migration.name}, ${Date.now()})`;
        }
      });
      await older.close();
      expect(crm(url, ["token", "create", "--name", "after-schema", "--database-schema", role]).exitCode).toBe(0);
      const refusal =
        `crm: cannot use the PostgreSQL database at ${url} (--database-url, CRM_DATABASE_URL): the service's tables are in more than one schema ("${role}", "public"): ` +
        `set --database-schema (CRM_DATABASE_SCHEMA) to the one in use (the README's Upgrading says how to tell which)\n`;
      for (const command of [["token", "list"], ["serve", "--port", "0", "--secrets-key-file", keyFile]]) {
        expect({ command, ...crm(url, command) }).toEqual({ command, exitCode: 2, stdout: "", stderr: refusal });
      }
      expect(tokenNames(url, ["--database-schema", role])).toEqual(["after-schema"]);
      expect(tokenNames(url, ["--database-schema", "public"])).toEqual(["before-schema"]);
      expect(await tablesByOwner(there, role)).toEqual([{ schemaname: role, tables: SERVICE_TABLES }, { schemaname: "public", tables: SERVICE_TABLES }]);
    });
  });

  test("two first starts at once on an empty database, one in public and one with --database-schema crm, make the tables once: the one that waited for the migration lock is refused in one line", async () => {
    await withRoleDatabase("together", async ({ role, url, admin: there }) => {
      // As a DBA sets up: the extensions made beforehand in public, and a schema crm for the role.
      await there.unsafe(`CREATE EXTENSION citext; CREATE EXTENSION pg_trgm; CREATE SCHEMA crm AUTHORIZATION "${role}"`);
      const [{ name }] = await there`SELECT current_database() AS name`;
      const waiting = async () =>
        (await admin`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = ${name})`)[0].n as number;
      // Another session's write holds the lock until both have checked the schemas and wait for it, the public one first.
      const holder = await there.reserve();
      await holder`BEGIN`;
      await holder`SELECT pg_advisory_xact_lock(${WRITE_LOCK}::bigint)`;
      const inPublic = started(url, ["migrate"]);
      await waitUntil(async () => (await waiting()) === 1, "the start in public to wait for the lock");
      const inCrm = started(url, ["migrate", "--database-schema", "crm"]);
      await waitUntil(async () => (await waiting()) === 2, "the start in crm to wait for the lock");
      await holder`COMMIT`;
      holder.release();
      expect(await inPublic).toEqual({ exitCode: 0, stdout: `applied ${POSTGRES_MIGRATIONS.map((m) => m.name).join(", ")}\n`, stderr: "" });
      expect(await inCrm).toEqual({
        exitCode: 2,
        stdout: "",
        stderr: `crm: cannot use the PostgreSQL database at ${url} (--database-url, CRM_DATABASE_URL): the service's tables are in schema "public", not in "crm" that --database-schema (CRM_DATABASE_SCHEMA) names: set it to public\n`,
      });
      expect(await tablesByOwner(there, role)).toEqual([{ schemaname: "public", tables: SERVICE_TABLES }]);
    });
  });

  test("copy-to-postgres --database-schema crm copies into an empty crm beside another application's users table and the extensions in public", async () => {
    await withRoleDatabase("beside", async ({ role, url, admin: there }) => {
      await there.unsafe("CREATE EXTENSION citext");
      await there.unsafe("CREATE EXTENSION pg_trgm");
      await there.unsafe(`CREATE TABLE public.users (id int)`);
      await there.unsafe(`ALTER TABLE public.users OWNER TO "${role}"`);
      await there.unsafe(`INSERT INTO public.users VALUES (1)`);
      await there.unsafe(`CREATE SCHEMA crm AUTHORIZATION "${role}"`);
      const dataDir = join(dir, "beside");
      expect(runCli([...SOURCE, "token", "create", "--name", "moved", "--data-dir", dataDir], { cwd: dir }).exitCode).toBe(0);
      const copy = crm(url, ["copy-to-postgres", "--data-dir", dataDir, "--database-schema", "crm"]);
      expect({ exitCode: copy.exitCode, stderr: copy.stderr.split("\n").filter((line) => !line.startsWith("copied ")) }).toEqual({ exitCode: 0, stderr: [""] });
      expect(tokenNames(url, ["--database-schema", "crm"])).toEqual(["moved"]);
      expect(await there`SELECT id FROM public.users`).toEqual([{ id: 1 }]);
    });
  });
});

describe("postgres configuration: the role", () => {
  test("a role without CREATE on the schema is refused at the first start in one line saying what it needs", async () => {
    await withRoleDatabase("guest", async ({ url }) => {
      expect(crm(url, ["migrate"])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr:
          "crm: cannot migrate the PostgreSQL database (--database-url, CRM_DATABASE_URL) to 0001_schema.sql, and nothing of it was applied: permission denied for schema public; " +
          "the role needs CREATE on the schema --database-schema names (GRANT CREATE ON SCHEMA ... TO the role), or set --database-schema to a schema it owns\n",
      });
    }, { owned: false });
  });

  test("a read-only role runs the commands that only read on a migrated database, and is refused in one line where a migration is due", async () => {
    await withRoleDatabase("replica", async ({ role, url, admin: there }) => {
      expect(crm(url, ["migrate"]).exitCode).toBe(0);
      await there.unsafe(`ALTER ROLE "${role}" SET default_transaction_read_only = on`);
      expect(crm(url, ["token", "list"])).toEqual({ exitCode: 0, stdout: "", stderr: "" });
      expect(crm(url, ["user", "list"])).toEqual({ exitCode: 0, stdout: "", stderr: "" });
      await there`DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)`;
      const last = POSTGRES_MIGRATIONS.at(-1)!.name;
      expect(crm(url, ["token", "list"])).toEqual({
        exitCode: 2,
        stdout: "",
        stderr:
          `crm: cannot migrate the PostgreSQL database (--database-url, CRM_DATABASE_URL) to ${last}, and nothing of it was applied: cannot execute CREATE TABLE in a read-only transaction; ` +
          "the server or the role is read-only (a standby, or default_transaction_read_only): point the database URL at the primary, with a role that may write\n",
      });
    });
  });

  test("a command that applies migrations before its work names them on stderr in one line, as migrate names them on stdout", async () => {
    await withRoleDatabase("applied", async ({ url }) => {
      // Every migration but the last, as the version before this one left the database.
      const older = await openPostgres(url, 1);
      await migratePostgres(older, POSTGRES_MIGRATIONS.slice(0, -1)).finally(() => older.close());
      expect(crm(url, ["token", "list"])).toEqual({ exitCode: 0, stdout: "", stderr: `crm: applied ${POSTGRES_MIGRATIONS.at(-1)!.name}\n` });
      expect(crm(url, ["token", "list"])).toEqual({ exitCode: 0, stdout: "", stderr: "" });
    });
  });

  test("a read-only role's command that writes is refused in one line saying the database is read-only for it", async () => {
    await withRoleDatabase("readonly", async ({ role, url, admin: there }) => {
      expect(crm(url, ["migrate"]).exitCode).toBe(0);
      await there.unsafe(`ALTER ROLE "${role}" SET default_transaction_read_only = on`);
      for (const command of [["token", "create", "--name", "x"], ["user", "create", "--name", "Ada", "--email", "ada@example.com"]]) {
        expect({ command, ...crm(url, command) }).toEqual({
          command,
          exitCode: 2,
          stdout: "",
          stderr:
            "crm: cannot write to the PostgreSQL database: cannot execute INSERT in a read-only transaction; " +
            "the server or the role is read-only (a standby, or default_transaction_read_only): point the database URL at the primary, with a role that may write\n",
        });
      }
    });
  });

  test("a role's lock_timeout does not end a start's wait for the write lock another session holds: the sessions set their own, which the write and migration locks are exempt from, and it migrates once the lock is free", async () => {
    await withRoleDatabase("hurried", async ({ role, url, admin: there }) => {
      await there.unsafe(`ALTER ROLE "${role}" SET lock_timeout = '100ms'`);
      await there`SELECT pg_advisory_lock(${WRITE_LOCK}::bigint)`;
      const migrating = started(url, ["migrate"]);
      const waiting = async () =>
        (await there`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)[0].n > 0;
      await waitUntil(waiting, "the migration to wait for the write lock");
      // Ten times the role's lock_timeout.
      await Bun.sleep(1_000);
      await there`SELECT pg_advisory_unlock(${WRITE_LOCK}::bigint)`;
      const { exitCode, stderr } = await migrating;
      expect({ exitCode, stderr }).toEqual({ exitCode: 0, stderr: "" });
    });
  });
});
