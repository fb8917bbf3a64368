import { afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { OPERATOR_LINK_TTL_MS, inviteOperator, operatorSummaries, pendingLinks, sessionOperator } from "../../server/operators/service.ts";
import { toTimestamp } from "../../server/shared/time.ts";
import { databaseArgs } from "../support/backend.ts";
import { afterBlockingCommand, createHarness, type Harness } from "../support/harness.ts";
import { addOperator, ConsoleClient, formKeyOf, OPERATOR, startConsoleServer } from "./support.ts";

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

/** setup starts an app with the test operator and a console client signed in as them. */
async function setup() {
  harness = await createHarness();
  const h = harness;
  await addOperator(h.rt.db);
  const client = new ConsoleClient((r) => h.app.handle(r));
  expect((await client.signIn()).status).toBe(303);
  await client.get("/console/operators"); // for the session's CSRF token
  return { h, client, browser: () => new ConsoleClient((r) => h.app.handle(r)) };
}

const operators = async (h: Harness) => (await h.rt.db.all<{ email: string }>("SELECT email FROM operators ORDER BY created_at, id")).map((o) => o.email);
const sessionsOf = async (h: Harness, email: string) =>
  (await h.rt.db.get<{ n: number }>("SELECT count(*) AS n FROM operator_sessions s JOIN operators o ON o.id = s.operator_id WHERE o.email = ?", [email]))!.n;
const idOf = async (h: Harness, email: string) => (await h.rt.db.get<{ id: string }>("SELECT id FROM operators WHERE email = ?", [email]))!.id;
/** operatorCommand runs `crm operator ...` on the harness's database. */
async function operatorCommand(h: Harness, args: string[], stdin = "") {
  const child = Bun.spawnSync([process.execPath, join(import.meta.dir, "../../server/main.ts"), "operator", ...args, ...databaseArgs(h.rt.config)], { stdin: Buffer.from(stdin) });
  await afterBlockingCommand();
  return { code: child.exitCode, out: child.stdout.toString(), err: child.stderr.toString() };
}
/** linkIn reads the one-time link a page shows (once) in its copy field. */
const linkIn = (html: string) => /id="operator-link"[^>]*value="([^"]+)"/.exec(html)?.[1]?.replaceAll("&amp;", "&") ?? null;

describe("operators page", () => {
  test("lists the operators; an invitation gives a one-time link with which the invitee chooses a password and is signed in", async () => {
    const { h, client, browser } = await setup();
    const page = await client.get("/console/operators");
    expect(page.status).toBe(200);
    expect(page.text).toContain(OPERATOR.email);
    const invited = await client.post("/console/operators", { email: "  New.Person@Example.com " });
    expect(invited.status).toBe(201);
    const link = linkIn(invited.text)!;
    expect(link).toMatch(/^http:\/\/localhost\/console\/welcome\?code=[A-Za-z0-9_-]{43}$/);
    // Shown once: the page lists the invitation, never the link again.
    const again = await client.get("/console/operators");
    expect(again.text).toContain("new.person@example.com");
    expect(linkIn(again.text)).toBeNull();

    const invitee = browser();
    const welcome = await invitee.get(link.slice("http://localhost".length));
    expect(welcome.status).toBe(200);
    expect(welcome.text).toContain("new.person@example.com");
    const joined = await invitee.post("/console/welcome", { code: new URL(link).searchParams.get("code")!, password: "a long new password", password_again: "a long new password" });
    expect([joined.status, joined.headers.get("location")]).toEqual([303, "/console/"]);
    expect((await invitee.get("/console/operators")).status).toBe(200);
    expect(await operators(h)).toEqual([OPERATOR.email, "new.person@example.com"]);
    // The link works once.
    const reused = await browser().get(link.slice("http://localhost".length));
    expect(reused.status).toBe(403);
  });

  test("an invitation refuses a bad email or an existing operator, and the link refuses two different passwords", async () => {
    const { h, client, browser } = await setup();
    const bad = await client.post("/console/operators", { email: "not an email" });
    expect([bad.status, bad.text.includes("email must be an email address")]).toEqual([422, true]);
    const existing = await client.post("/console/operators", { email: OPERATOR.email.toUpperCase() });
    expect([existing.status, existing.text.includes(`An operator with email ${OPERATOR.email} already exists.`)]).toEqual([409, true]);
    const code = await inviteOperator(h.rt.db, "late@example.com", null);
    const invitee = browser();
    await invitee.get(`/console/welcome?code=${code}`);
    const differ = await invitee.post("/console/welcome", { code, password: "one long password", password_again: "another long one" });
    expect([differ.status, differ.text.includes("password again must repeat the password.")]).toEqual([422, true]);
    const short = await invitee.post("/console/welcome", { code, password: "short", password_again: "short" });
    expect([short.status, short.text.includes("password must be 10 to 512 characters")]).toEqual([422, true]);
    expect(await operators(h)).toEqual([OPERATOR.email]);
  });

  test("invitations made in the same millisecond are listed in one order on both backends: by email", async () => {
    const { h, client } = await setup();
    const now = Date.now();
    for (const email of ["d@example.com", "b@example.com", "a@example.com", "c@example.com"]) await inviteOperator(h.rt.db, email, null, now);
    const page = (await client.get("/console/operators")).text;
    const shown = ["a@example.com", "b@example.com", "c@example.com", "d@example.com"].map((email) => [email, page.indexOf(email)] as const).toSorted((x, y) => x[1] - y[1]);
    expect(shown.map(([email, at]) => [email, at > 0])).toEqual([
      ["a@example.com", true],
      ["b@example.com", true],
      ["c@example.com", true],
      ["d@example.com", true],
    ]);
  });

  test("an invitation expires", async () => {
    const { h, browser } = await setup();
    const code = await inviteOperator(h.rt.db, "late@example.com", null, Date.now() - OPERATOR_LINK_TTL_MS - 1);
    const invitee = browser();
    expect((await invitee.get(`/console/welcome?code=${code}`)).status).toBe(403);
    expect((await invitee.post("/console/welcome", { code, password: "a long new password", password_again: "a long new password" })).status).toBe(403);
    expect(await operators(h)).toEqual([OPERATOR.email]);
  });

  test("a password reset, after its confirm step, gives a link that sets the new password and ends the operator's sessions", async () => {
    const { h, client, browser } = await setup();
    const other = { email: "other@example.com", password: "the old password" };
    await addOperator(h.rt.db, other);
    const otherSession = browser();
    expect((await otherSession.signIn(other)).status).toBe(303);
    const id = await idOf(h, other.email);
    const confirm = await client.get(`/console/operators/${id}/reset-password`);
    expect([confirm.status, confirm.text.includes(other.email)]).toEqual([200, true]);
    const made = await client.post(`/console/operators/${id}/reset-password`, {});
    expect(made.status).toBe(201);
    const link = linkIn(made.text)!;
    const code = new URL(link).searchParams.get("code")!;
    // The old password works until the link is used.
    expect((await browser().signIn(other)).status).toBe(303);
    const reset = browser();
    await reset.get(`/console/welcome?code=${code}`);
    expect((await reset.post("/console/welcome", { code, password: "the new password", password_again: "the new password" })).status).toBe(303);
    expect(await sessionsOf(h, other.email)).toBe(1); // only the one the link just started
    expect((await otherSession.get("/console/operators")).status).toBe(303);
    expect((await browser().signIn(other)).status).toBe(401);
    expect((await browser().signIn({ ...other, password: "the new password" })).status).toBe(303);
  });

  test("removing an operator asks first, ends their sessions, and the last operator cannot be removed", async () => {
    const { h, client, browser } = await setup();
    const other = { email: "other@example.com", password: "the old password" };
    await addOperator(h.rt.db, other);
    const otherSession = browser();
    await otherSession.signIn(other);
    const id = await idOf(h, other.email);
    const confirm = await client.get(`/console/operators/${id}/remove`);
    expect([confirm.status, confirm.text.includes(`Remove ${other.email}`)]).toEqual([200, true]);
    const removed = await client.post(`/console/operators/${id}/remove`, {});
    expect([removed.status, removed.headers.get("location")]).toEqual([303, "/console/operators?removed=1"]);
    expect(await operators(h)).toEqual([OPERATOR.email]);
    expect((await otherSession.get("/console/")).status).toBe(303);
    const last = await client.post(`/console/operators/${await idOf(h, OPERATOR.email)}/remove`, {});
    expect([last.status, last.text.includes("This is the only operator")]).toEqual([409, true]);
    expect(await operators(h)).toEqual([OPERATOR.email]);
    expect((await client.get("/console/operators/opr_01J00000000000000000000000/remove")).status).toBe(404);
  });

  test("every operators form needs the session's CSRF token", async () => {
    const { h, client } = await setup();
    await addOperator(h.rt.db, { email: "other@example.com", password: "the old password" });
    const id = await idOf(h, "other@example.com");
    for (const path of ["/console/operators", `/console/operators/${id}/remove`, `/console/operators/${id}/reset-password`]) {
      expect([path, (await client.post(path, { _csrf: null, email: "x@example.com" })).status]).toEqual([path, 403]);
    }
    expect(await operators(h)).toEqual([OPERATOR.email, "other@example.com"]);
    expect(await h.rt.db.get("SELECT count(*) AS n FROM operator_links")).toEqual({ n: 0 });
  });
});

describe("operators' last seen", () => {
  const HOUR = 3_600_000;
  /** sessionSeen is when the operator's one session was last used, as stored. */
  const sessionSeen = async (h: Harness, id: string) => (await h.rt.db.get<{ last_seen_at: number }>("SELECT last_seen_at FROM operator_sessions WHERE operator_id = ?", [id]))!.last_seen_at;
  /** ageSessions moves the operator's sessions `ms` into the past, as time passing would. */
  const ageSessions = (h: Harness, id: string, ms: number) => h.rt.db.run("UPDATE operator_sessions SET created_at = created_at - ?, last_seen_at = last_seen_at - ? WHERE operator_id = ?", [ms, ms, id]);
  /** lastSeenShown reads an operator's last seen from the operators page and from `operator list`. */
  const lastSeenShown = async (h: Harness, client: ConsoleClient, id: string) => {
    const row = new RegExp(`<tr id="${id}" data-operator-id="${id}">[\\s\\S]*?</tr>`).exec((await client.get("/console/operators")).text)![0];
    const line = (await operatorCommand(h, ["list"])).out.split("\n").find((l) => l.startsWith(`${id}  `))!;
    return { page: /data-label="Last seen">\s*(?:<time datetime="([^"]+)"|<span class="muted">–)/.exec(row)![1] ?? null, cli: / last seen (\S+)$/.exec(line)![1] };
  };

  test("outlives the operator's sessions: after they sign out, and after their session ended and another sign-in pruned it", async () => {
    const { h, client, browser } = await setup();
    const other = { email: "other@example.com", password: "the old password" };
    const { id } = await addOperator(h.rt.db, other);
    expect(await lastSeenShown(h, client, id)).toEqual({ page: null, cli: "never" });
    const otherBrowser = browser();
    expect((await otherBrowser.signIn(other)).status).toBe(303);
    // Its last use an hour ago, the session records this visit.
    await ageSessions(h, id, HOUR);
    expect((await otherBrowser.get("/console/")).status).toBe(200);
    const visited = await sessionSeen(h, id);
    expect((await otherBrowser.post("/console/logout", {})).status).toBe(303);
    expect(await sessionsOf(h, other.email)).toBe(0);
    expect(await lastSeenShown(h, client, id)).toEqual({ page: toTimestamp(visited), cli: toTimestamp(visited) });

    expect((await otherBrowser.signIn(other)).status).toBe(303);
    const signedIn = await sessionSeen(h, id);
    await ageSessions(h, id, 25 * HOUR);
    expect((await browser().signIn()).status).toBe(303);
    expect(await sessionsOf(h, other.email)).toBe(0);
    expect(await lastSeenShown(h, client, id)).toEqual({ page: toTimestamp(signedIn), cli: toTimestamp(signedIn) });
  }, 30_000);

  test("a visit recorded by an instance whose clock is behind does not move it back", async () => {
    const { h, client } = await setup();
    const { id } = (await h.rt.db.get<{ id: string }>("SELECT id FROM operators WHERE email = ?", [OPERATOR.email]))!;
    const signedIn = await sessionSeen(h, id);
    await ageSessions(h, id, HOUR);
    const unrecorded: unknown[] = [];
    expect(await sessionOperator(h.rt.db, client.cookies.get("crm_console_session"), (error) => unrecorded.push(error), signedIn - HOUR / 2)).toEqual({ id, email: OPERATOR.email });
    expect({ unrecorded, session: await sessionSeen(h, id) }).toEqual({ unrecorded: [], session: signedIn - HOUR / 2 });
    expect((await operatorSummaries(h.rt.db)).map((o) => o.last_seen_at)).toEqual([toTimestamp(signedIn)]);
  });
});

describe("operators behind a reverse proxy", () => {
  test("behind a trusted proxy that terminates TLS, X-Forwarded-Proto: https makes the invitation and reset links https", async () => {
    // The test connects from 127.0.0.1, the proxy the server trusts, as nginx in front of it would.
    const server = await startConsoleServer({ trustedProxies: ["127.0.0.1"] });
    try {
      await addOperator(server.runtime.db);
      const other = await addOperator(server.runtime.db, { email: "other@example.com", password: "the old password" });
      /** linksMade invites an operator and resets another's password through the proxy, and returns the two links the pages show. */
      const linksMade = async (proto: string | null, invitee: string) => {
        const client = new ConsoleClient((r) => {
          r.headers.set("host", "crm.example.com");
          if (proto !== null) r.headers.set("x-forwarded-proto", proto);
          return fetch(r, { redirect: "manual" });
        }, server.url);
        expect((await client.signIn()).status).toBe(303);
        await client.get("/console/operators");
        const invited = await client.post("/console/operators", { email: invitee });
        const reset = await client.post(`/console/operators/${other.id}/reset-password`, {});
        return [invited.status, linkIn(invited.text)?.replace(/code=[A-Za-z0-9_-]{43}$/, "code=…"), reset.status, linkIn(reset.text)?.replace(/code=[A-Za-z0-9_-]{43}$/, "code=…")];
      };
      const links = (scheme: string) => [201, `${scheme}://crm.example.com/console/welcome?code=…`, 201, `${scheme}://crm.example.com/console/welcome?code=…`];
      expect(await linksMade("https", "first@example.com")).toEqual(links("https"));
      expect(await linksMade(null, "second@example.com")).toEqual(links("http"));
    } finally {
      await server.close();
    }
  }, 30_000);
});

describe("one-time links of the operators page", () => {
  const MALLORY = { email: "mallory@example.com", password: "mallory's password" };
  /** resetLinkFor makes a password-reset link through the confirm step, as `by`, and returns its code. */
  async function resetLinkFor(by: ConsoleClient, id: string): Promise<string> {
    const confirm = await by.get(`/console/operators/${id}/reset-password`);
    const made = await by.post(`/console/operators/${id}/reset-password`, { form_key: formKeyOf(confirm.text) });
    expect(made.status).toBe(201);
    return new URL(linkIn(made.text)!).searchParams.get("code")!;
  }
  /** inviteAs invites an email, as `by`, and returns the link's code. */
  async function inviteAs(by: ConsoleClient, email: string): Promise<string> {
    const page = await by.get("/console/operators");
    const invited = await by.post("/console/operators", { email, form_key: formKeyOf(page.text) });
    expect(invited.status).toBe(201);
    return new URL(linkIn(invited.text)!).searchParams.get("code")!;
  }
  /** pendingRows is the operators page's table of links not used yet: for, link, made by, and the Withdraw button's words. */
  const pendingRows = (html: string) =>
    [...(/<table[^>]*id="links"[\s\S]*?<\/table>/.exec(html)?.[0] ?? "").matchAll(/<tr>\s*<td data-label="For">([^<]*)<\/td><td data-label="Link">([^<]*)<\/td><td data-label="Made by">(?:<span[^>]*>)?([^<]*)[\s\S]*?Withdraw<span class="visually-hidden"> ([^<]*)<\/span>/g)].map((m) => m.slice(1));
  /** opens tells whether a link's page opens (200), or calls it invalid (403). */
  const opens = async (h: Harness, code: string) => (await new ConsoleClient((r) => h.app.handle(r)).get(`/console/welcome?code=${code}`)).status;

  test("removing an operator withdraws every link they made (a reset link for a colleague, an invitation of an address of their own); the links others made stay", async () => {
    const { h, client, browser } = await setup();
    const admin = await idOf(h, OPERATOR.email);
    const mallory = await addOperator(h.rt.db, MALLORY);
    const malloryBrowser = browser();
    expect((await malloryBrowser.signIn(MALLORY)).status).toBe(303);
    const reset = await resetLinkFor(malloryBrowser, admin);
    const backdoor = await inviteAs(malloryBrowser, "mallory.backup@example.net");
    const colleague = await inviteAs(client, "colleague@example.com");
    expect(pendingRows((await client.get("/console/operators")).text)).toEqual([
      ["colleague@example.com", "Invitation", OPERATOR.email, "invitation for colleague@example.com"],
      ["mallory.backup@example.net", "Invitation", MALLORY.email, "invitation for mallory.backup@example.net"],
      [OPERATOR.email, "Password reset", MALLORY.email, `password reset link for ${OPERATOR.email}`],
    ]);
    const confirm = await client.get(`/console/operators/${mallory.id}/remove`);
    const removed = await client.post(`/console/operators/${mallory.id}/remove`, { form_key: formKeyOf(confirm.text) });
    expect([removed.status, removed.headers.get("location")]).toEqual([303, "/console/operators?removed=1"]);
    const page = await client.get("/console/operators?removed=1");
    expect([/class="notice notice-success"[^>]*>([^<]*)</.exec(page.text)?.[1], pendingRows(page.text)]).toEqual([
      "Operator removed. Their sessions have ended, and the links they made no longer work.",
      [["colleague@example.com", "Invitation", OPERATOR.email, "invitation for colleague@example.com"]],
    ]);
    expect({ reset: await opens(h, reset), backdoor: await opens(h, backdoor), colleague: await opens(h, colleague) }).toEqual({ reset: 403, backdoor: 403, colleague: 200 });
    const outsider = browser();
    await outsider.get("/console/login");
    const taken = await outsider.post("/console/welcome", { code: reset, password: "now mallory's", password_again: "now mallory's" });
    expect([taken.status, (await client.get("/console/")).status, await operators(h)]).toEqual([403, 200, [OPERATOR.email]]);
  });

  test("the operators page lists pending invitations and reset links with who made them; Withdraw, after a confirm step, ends one (the form needs the page's CSRF token), and a link replaced or gone since is left alone", async () => {
    const { h, client, browser } = await setup();
    const other = await addOperator(h.rt.db, { email: "other@example.com", password: "the old password" });
    const invite = await inviteOperator(h.rt.db, "cli.invite@example.com", null);
    const reset = await resetLinkFor(client, other.id);
    const page = await client.get("/console/operators");
    expect(pendingRows(page.text)).toEqual([
      ["other@example.com", "Password reset", OPERATOR.email, "password reset link for other@example.com"],
      ["cli.invite@example.com", "Invitation", "command line", "invitation for cli.invite@example.com"],
    ]);
    const shown = (await pendingLinks(h.rt.db)).find((link) => link.purpose === "reset")!;
    const withdraw = { link_purpose: "reset", link_email: "other@example.com", link_created_at: shown.created_at };
    expect(page.text).toContain(`<input type="hidden" name="link_created_at" value="${shown.created_at}"/>`);
    // The row's button asks first, as Remove and Revoke do, and withdraws nothing: the confirm page's button sends the link again, confirmed.
    const asked = await client.post("/console/operators/links/withdraw", withdraw);
    const hidden = Object.fromEntries([...asked.text.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)"\/>/g)].filter(([, name]) => name !== "_csrf").map(([, name, value]) => [name, value]));
    expect([asked.status, /<h1>([^<]*)<\/h1>/.exec(asked.text)?.[1], /<p>(.*?)<\/p>/.exec(asked.text)?.[1]?.replace(/<[^>]+>/g, ""), hidden, /<button[^>]*>([^<]*)</.exec(asked.text.slice(asked.text.indexOf("<h1>")))?.[1]]).toEqual([
      200,
      "Withdraw link",
      "Withdraw the password reset link for other@example.com? It stops working at once.",
      { ...withdraw, confirm: "yes" },
      "Withdraw the password reset link for other@example.com",
    ]);
    expect(await opens(h, reset)).toBe(200);
    const confirmed = { ...withdraw, confirm: "yes" };
    // Without the page's token (a post from another site), nothing is withdrawn.
    expect((await client.post("/console/operators/links/withdraw", { ...confirmed, _csrf: null })).status).toBe(403);
    expect(await opens(h, reset)).toBe(200);
    const withdrawn = await client.post("/console/operators/links/withdraw", confirmed);
    expect([withdrawn.status, withdrawn.headers.get("location")]).toEqual([303, "/console/operators?withdrawn=1"]);
    const after = await client.get("/console/operators?withdrawn=1");
    expect([/class="notice notice-success"[^>]*>([^<]*)</.exec(after.text)?.[1], pendingRows(after.text).map((row) => row[0])]).toEqual(["Link withdrawn. It no longer works.", ["cli.invite@example.com"]]);
    expect({ reset: await opens(h, reset), invite: await opens(h, invite) }).toEqual({ reset: 403, invite: 200 });
    // Sent again (a double click), or for a link replaced by a newer one since: the newer one stays.
    const newer = await resetLinkFor(client, other.id);
    const again = await client.post("/console/operators/links/withdraw", confirmed);
    expect([again.status, again.headers.get("location")]).toEqual([303, "/console/operators?withdrawn=0"]);
    expect(/class="notice notice-info"[^>]*>([^<]*)</.exec((await client.get("/console/operators?withdrawn=0")).text)?.[1]).toBe(
      "That link was no longer pending (used, withdrawn, replaced by a newer one or expired); nothing was withdrawn.",
    );
    expect(await opens(h, newer)).toBe(200);
    const otherBrowser = browser();
    await otherBrowser.get(`/console/welcome?code=${newer}`);
    expect((await otherBrowser.post("/console/welcome", { code: newer, password: "their new password", password_again: "their new password" })).status).toBe(303);
  });
});

describe("operators on the command line", () => {
  test("`operator create` for an email with a pending invitation: the invitation is listed no more, and its link says the operator exists and offers to sign in (409), opened or sent, until that operator is removed", async () => {
    const { h, client, browser } = await setup();
    const invited = await client.post("/console/operators", { email: "late@example.com" });
    const code = new URL(linkIn(invited.text)!).searchParams.get("code")!;
    const listsInvitations = async () => (await client.get("/console/operators")).text.includes("Links not used yet");
    expect([await listsInvitations(), (await pendingLinks(h.rt.db)).map((link) => link.email)]).toEqual([true, ["late@example.com"]]);
    const invitee = browser();
    expect((await invitee.get(`/console/welcome?code=${code}`)).status).toBe(200);
    const made = await operatorCommand(h, ["create", "--email", "Late@Example.com", "--password-stdin"], "their own long password\n");
    expect(made).toEqual({ code: 0, out: `created operator ${await idOf(h, "late@example.com")} (late@example.com); sign in at /console/login\n`, err: "" });
    expect([await listsInvitations(), await pendingLinks(h.rt.db), await operators(h)]).toEqual([false, [], [OPERATOR.email, "late@example.com"]]);
    /** told is what the invitation's page says: its status, whether it names the operator as existing and offers Sign in, or calls the link invalid. */
    const told = (res: { status: number; text: string }) => ({ status: res.status, exists: res.text.includes("exists already, so this invitation cannot be used"), signIn: res.text.includes('href="/console/login"'), invalid: res.text.includes("This link is invalid") });
    const sent = await invitee.post("/console/welcome", { code, password: "one long password", password_again: "one long password" });
    const opened = await browser().get(`/console/welcome?code=${code}`);
    expect({ sent: told(sent), opened: told(opened) }).toEqual({ sent: { status: 409, exists: true, signIn: true, invalid: false }, opened: { status: 409, exists: true, signIn: true, invalid: false } });
    // Removing that operator ends the invitation with their other links: it does not come back.
    expect((await operatorCommand(h, ["remove", "--email", "late@example.com"])).code).toBe(0);
    expect([await pendingLinks(h.rt.db), told(await browser().get(`/console/welcome?code=${code}`))]).toEqual([[], { status: 403, exists: false, signIn: false, invalid: true }]);
  }, 30_000);

  test("`operator reset-password` withdraws a pending reset link for that operator: the link made before would undo the reset", async () => {
    const { h, client, browser } = await setup();
    const other = await addOperator(h.rt.db, { email: "other@example.com", password: "the old password" });
    const confirm = await client.get(`/console/operators/${other.id}/reset-password`);
    const code = new URL(linkIn((await client.post(`/console/operators/${other.id}/reset-password`, { form_key: formKeyOf(confirm.text) })).text)!).searchParams.get("code")!;
    const invite = await inviteOperator(h.rt.db, "invited@example.com", null);
    expect((await operatorCommand(h, ["reset-password", "--email", "other@example.com", "--password-stdin"], "a brand new password\n")).code).toBe(0);
    const holder = browser();
    const opened = await holder.get(`/console/welcome?code=${code}`);
    const used = await holder.post("/console/welcome", { code, password: "the link holder's", password_again: "the link holder's" });
    expect({ opened: opened.status, used: used.status, links: await h.rt.db.all("SELECT purpose, email FROM operator_links"), invite: (await browser().get(`/console/welcome?code=${invite}`)).status }).toEqual({
      opened: 403,
      used: 403,
      links: [{ purpose: "invite", email: "invited@example.com" }],
      invite: 200,
    });
    expect((await browser().signIn({ email: "other@example.com", password: "a brand new password" })).status).toBe(303);
  }, 30_000);

  test("`operator list`, `operator reset-password` and `operator remove`", async () => {
    harness = await createHarness();
    const h = harness;
    await addOperator(h.rt.db);
    await addOperator(h.rt.db, { email: "other@example.com", password: "the old password" });
    const run = (args: string[], stdin = "") => operatorCommand(h, args, stdin);
    const listed = await run(["list"]);
    expect(listed.code).toBe(0);
    expect(listed.out.split("\n").filter(Boolean).map((line) => line.split("  ").slice(1, 2))).toEqual([[OPERATOR.email], ["other@example.com"]]);
    const client = new ConsoleClient((r) => h.app.handle(r));
    expect((await client.signIn({ email: "other@example.com", password: "the old password" })).status).toBe(303);

    expect(await run(["reset-password", "--email", "OTHER@example.com", "--password-stdin"], "a brand new password\n")).toEqual({
      code: 0,
      out: `set a new password for operator ${await idOf(h, "other@example.com")} (other@example.com); their sessions have ended\n`,
      err: "",
    });
    expect((await client.get("/console/")).status).toBe(303);
    expect((await new ConsoleClient((r) => h.app.handle(r)).signIn({ email: "other@example.com", password: "a brand new password" })).status).toBe(303);
    expect(await run(["reset-password", "--email", "other@example.com", "--password-stdin"], "short\n")).toEqual({ code: 2, out: "", err: "crm: password must be 10 to 512 characters.\n" });
    expect(await run(["reset-password", "--email", "nobody@example.com", "--password-stdin"], "a brand new password\n")).toEqual({ code: 2, out: "", err: "crm: No operator has the email nobody@example.com.\n" });

    const id = await idOf(h, "other@example.com");
    expect(await run(["remove", "--email", "other@example.com"])).toEqual({ code: 0, out: `removed operator ${id} (other@example.com); their sessions have ended, and the links they made no longer work\nthey made no API token still active\nthey made no subscription, themselves or with one of their API tokens\n`, err: "" });
    expect(await operators(h)).toEqual([OPERATOR.email]);
    expect(await run(["remove", "--email", OPERATOR.email])).toEqual({ code: 2, out: "", err: "crm: This is the only operator; add another before removing it, or nobody could sign in.\n" });
    expect(await run(["remove"])).toEqual({ code: 2, out: "", err: "crm: operator remove needs --email E\n" });
    expect(await run(["forget"])).toEqual({ code: 2, out: "", err: "crm: operator forget needs --email E\n" });
    expect((await run(["frobnicate"])).err).toBe("crm: usage: operator list | operator create --email E --password-stdin | operator remove --email E [--revoke-tokens] [--disable-subscriptions] | operator forget --email E | operator reset-password --email E --password-stdin | operator unlock --email E\n");
  }, 30_000);
});

/** messageOf is the text of a confirmation page's message, above its form, tags dropped (the text as HTML escapes it). */
const messageOf = (html: string) => /<section class="card message">([\s\S]*?)<form/.exec(html)![1]!.replace(/<[^>]+>/g, "");

describe("users page: deleting a user", () => {
  test("each user's Delete link asks first; confirming deletes the user as the API does (its contacts lose the assignment, each sending contact.updated) and the list says so", async () => {
    const { h, client } = await setup();
    const grace = (await h.json("POST", "/public/v1/users", { body: { name: "Grace <Hopper>", email: "grace@navy.mil" } })).body.data;
    const alan = (await h.json("POST", "/public/v1/users", { body: { name: "Alan", email: "alan@example.com" } })).body.data;
    const contact = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Ada", assigned_user_id: grace.id, assigned_user_ids: [alan.id, grace.id] } })).body.data;
    const other = (await h.json("POST", "/public/v1/contacts", { body: { first_name: "Bea", assigned_user_ids: [grace.id] } })).body.data;
    const list = await client.get("/console/users");
    expect([...list.text.matchAll(/<a href="([^"]+)">Contacts<span class="visually-hidden"> of user ([^<]+)<\/span><\/a>/g)].map((m) => [m[1], m[2]])).toEqual([
      [`/console/contacts?assigned_user_id=${grace.id}`, "grace@navy.mil"],
      [`/console/contacts?assigned_user_id=${alan.id}`, "alan@example.com"],
    ]);
    const owned = await client.get(`/console/contacts?assigned_user_id=${grace.id}`);
    expect([owned.status, [...owned.text.matchAll(/data-contact-id="([^"]+)"/g)].map((m) => m[1]), /id="contacts-count">([^<]*)</.exec(owned.text)?.[1]]).toEqual([
      200,
      [contact.id],
      "Showing all 1 whose assigned user (assigned_user_id) is \u2068Grace &lt;Hopper>\u2069.",
    ]);
    expect([...list.text.matchAll(/<a class="danger-link" href="([^"]+)">Delete<span class="visually-hidden"> user ([^<]+)<\/span><\/a>/g)].map((m) => [m[1], m[2]])).toEqual([
      [`/console/users/${grace.id}/delete`, "grace@navy.mil"],
      [`/console/users/${alan.id}/delete`, "alan@example.com"],
    ]);
    const confirm = await client.get(`/console/users/${grace.id}/delete`);
    expect([confirm.status, messageOf(confirm.text)]).toEqual([
      200,
      "Delete user?Delete Grace &lt;Hopper> (grace@navy.mil)? 2 contacts are assigned to them (as assigned_user_id or in assigned_user_ids): they stay, no longer assigned to them, and each sends contact.updated. This cannot be undone.",
    ]);
    expect(confirm.text).toContain(`<form method="post" action="/console/users/${grace.id}/delete" class="actions">`);
    expect(confirm.text).toContain(`Delete grace@navy.mil</button>`);
    const deleted = await client.post(`/console/users/${grace.id}/delete`, { form_key: formKeyOf(confirm.text) });
    expect([deleted.status, deleted.headers.get("location")]).toEqual([303, "/console/users?deleted=1&unassigned=2"]);
    const after = await client.get("/console/users?deleted=1&unassigned=2");
    expect(/class="notice notice-success"[^>]*>([^<]*)</.exec(after.text)?.[1]).toBe("User deleted. 2 contacts lost the assignment; each sends contact.updated.");
    expect(after.text).not.toContain("grace@navy.mil");
    expect((await h.json("GET", "/public/v1/users")).body.data).toEqual([alan]);
    const unassigned = (await h.json("GET", `/public/v1/contacts/${contact.id}`)).body.data;
    expect(unassigned).toEqual({ ...contact, assigned_user_id: null, assigned_user_ids: [alan.id], version: 2, updated_at: unassigned.updated_at });
    expect((await h.json("GET", `/public/v1/contacts/${other.id}`)).body.data).toMatchObject({ assigned_user_ids: [], version: 2 });
    const events = await h.rt.db.all<{ type: string; payload: string }>("SELECT type, payload FROM events ORDER BY created_at, id");
    expect(events.map((e) => [e.type, JSON.parse(e.payload).data]).filter(([, data]) => data.id === contact.id)).toEqual([
      ["contact.created", contact],
      ["contact.updated", unassigned],
    ]);
  });

  test("an unknown user is 404, on the confirmation and on its form, and nothing changes", async () => {
    const { h, client } = await setup();
    const grace = (await h.json("POST", "/public/v1/users", { body: { name: "Grace", email: "grace@navy.mil" } })).body.data;
    const missing = "usr_01M8000000000000000000NOPE";
    expect((await client.get(`/console/users/${missing}/delete`)).status).toBe(404);
    const posted = await client.post(`/console/users/${missing}/delete`, { form_key: crypto.randomUUID() });
    expect([posted.status, /<p>([^<]*)<\/p>/.exec(posted.text)?.[1]]).toEqual([404, `No user with id &quot;${missing}&quot; exists.`]);
    expect((await h.json("GET", "/public/v1/users")).body.data).toEqual([grace]);
  });

  test("the add form sent again after its user was deleted says so in the console's words (410) and adds nobody", async () => {
    const { h, client } = await setup();
    const form = { form_key: formKeyOf((await client.get("/console/users")).text), name: "Grace", email: "grace@navy.mil" };
    expect((await client.post("/console/users", form)).status).toBe(303);
    const grace = (await h.json("GET", "/public/v1/users")).body.data[0];
    const confirm = await client.get(`/console/users/${grace.id}/delete`);
    expect((await client.post(`/console/users/${grace.id}/delete`, { form_key: formKeyOf(confirm.text) })).status).toBe(303);
    const again = await client.post("/console/users", form);
    expect([again.status, /class="notice notice-error"[^>]*>([^<]*)</.exec(again.text)?.[1]]).toEqual([
      410,
      "This form was already sent, and what it made has been deleted since. Load the page again to send it anew.",
    ]);
    expect((await h.json("GET", "/public/v1/users")).body.data).toEqual([]);
  });
});
