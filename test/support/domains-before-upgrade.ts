import type { Database } from "../../server/db/sql.ts";

/**
 * Accounts as a crm before migration 0048 could store their domains, for the tests of 0048 on
 * each backend: host names spelt with a trailing dot (one beside an account holding the name
 * without it, one alone, one in Unicode as a crm before IDNA kept it), and domains that are no
 * host name, with or without a trailing dot, which it leaves as they are.
 */
const DOMAINS_BEFORE = [
  ["acc_1", "Engines", "engines.example."],
  ["acc_2", "Engines Ltd", "engines.example"],
  ["acc_3", "Solo", "solo.example."],
  ["acc_4", "Müller", "müller.de."],
  ["acc_5", "Dots", ".."],
  ["acc_6", "Typo", "a..b."],
  ["acc_7", "Dot", "."],
  ["acc_8", "Single", "acme."],
  ["acc_9", "None", null],
] as const;

/** storeDomainsBeforeUpgrade writes DOMAINS_BEFORE as a crm before 0048 could have stored them, at version 3. */
export function storeDomainsBeforeUpgrade(db: Database): Promise<void> {
  return db.write(async (tx) => {
    for (const [id, name, domain] of DOMAINS_BEFORE) await tx.run("INSERT INTO accounts (id, name, name_key, domain, properties, version, created_at, updated_at) VALUES (?, ?, ?, ?, '{}', 3, 1, 2)", [id, name, name.toLowerCase(), domain]);
  });
}

/** domainRows reads every account's domain, version and updated_at, by id. */
export const domainRows = (db: Database) => db.all("SELECT id, domain, version, updated_at FROM accounts ORDER BY id");

/** DOMAINS_AFTER are the accounts after 0048: the host names without their dot, the others as they were, no version or updated_at changed. */
export const DOMAINS_AFTER = [
  ["acc_1", "engines.example"],
  ["acc_2", "engines.example"],
  ["acc_3", "solo.example"],
  ["acc_4", "xn--mller-kva.de"],
  ["acc_5", ".."],
  ["acc_6", "a..b."],
  ["acc_7", "."],
  ["acc_8", "acme."],
  ["acc_9", null],
].map(([id, domain]) => ({ id, domain, version: 3, updated_at: 2 }));

/** DOMAIN_WARNINGS are the warnings 0048 gives of those accounts: the domain it gives an account that another already had, and the domains that are no host name. */
export const DOMAIN_WARNINGS: [string, Record<string, unknown>][] = [
  [
    "migration: these accounts have one domain now that a trailing dot is dropped from it, so a batch upsert or crm import of that domain picks among them by name, and refuses an item whose name none or several of them have: give each its own domain, or keep one and delete the others (README, Upgrading)",
    { migration: "0048_account_domains_without_trailing_dot.sql", domain: "engines.example", accounts: [{ id: "acc_1", name: "Engines" }, { id: "acc_2", name: "Engines Ltd" }] },
  ],
  [
    "migration: these accounts' domains are no host name, kept as they are: a batch upsert or crm import no longer matches an account by such a domain, and a PATCH sending it is refused; give each its real domain or null (README, Upgrading)",
    {
      migration: "0048_account_domains_without_trailing_dot.sql",
      count: 4,
      accounts: [
        { id: "acc_5", name: "Dots", domain: ".." },
        { id: "acc_6", name: "Typo", domain: "a..b." },
        { id: "acc_7", name: "Dot", domain: "." },
        { id: "acc_8", name: "Single", domain: "acme." },
      ],
    },
  ],
];
