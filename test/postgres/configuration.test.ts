import { SQL } from "bun";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { runCli, SOURCE, tempDir } from "../ops/support.ts";
import { writeSecretsKeyFile } from "../support/backend.ts";
import { createTestDatabase, type TestDatabase } from "../support/postgres.ts";

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

/** crm runs the command line from source in an empty working directory, on the database at `url`. */
function crm(url: string, args: string[]) {
  return runCli([...SOURCE, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "", CRM_DATABASE_URL: url } });
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
