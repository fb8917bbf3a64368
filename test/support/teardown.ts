// Preloaded by bunfig.toml for every `bun test` run: hooks here run once for the whole run.
import { afterAll } from "bun:test";
import { stopPostgresServer } from "./postgres.ts";

// The PostgreSQL test server is shared by all test files, so it stops after the last one.
afterAll(stopPostgresServer);
