import type { Database } from "../../server/db/sql.ts";

/**
 * Accounts as a crm before migration 0034 keyed them (NFC, lowercased), for the tests of 0034 on
 * each backend: the rekeyed ones, one left alone, and pairs the old key kept apart that the new one
 * joins (Straße / STRASSE, made twice by a batch upsert of the capitals before the upgrade).
 */
export const OLD_ACCOUNT_NAMES = [
  ["acc_1", "Großhandel Süd GmbH"],
  ["acc_2", "Müller GmbH"],
  ["acc_3", "ﬀ Ltd"],
  ["acc_4", "ΟΔΟΣ Α.Ε."],
  ["acc_5", "GROẞHANDEL NORD GMBH"],
  ["acc_6", "ΕΥΡΩΠΑΪ́ΚΉ ΤΡΆΠΕΖΑ"],
  ["acc_7", "İSTANBUL GIDA"],
  ["acc_8", "Straße Logistik AG"],
  ["acc_9", "STRASSE LOGISTIK AG"],
  ["acc_a", "Istanbul Gıda"],
] as const;

/** oldNameKey is the name_key the versions before 0034 stored. */
export const oldNameKey = (name: string) => name.normalize("NFC").toLowerCase();

/** storeAccountsKeyedTheOldWay writes OLD_ACCOUNT_NAMES with the keys a crm before 0034 gave them: before 0034, or after it when left running beside the crm that migrated. */
export function storeAccountsKeyedTheOldWay(db: Database): Promise<void> {
  return db.write(async (tx) => {
    for (const [id, name] of OLD_ACCOUNT_NAMES) await tx.run("INSERT INTO accounts (id, name, name_key, properties, created_at, updated_at) VALUES (?, ?, ?, '{}', 1, 1)", [id, name, oldNameKey(name)]);
  });
}

/** NEW_NAME_KEYS are the accounts' keys after 0034, by id. */
export const NEW_NAME_KEYS = [
  { id: "acc_1", name_key: "grosshandel süd gmbh" },
  { id: "acc_2", name_key: "müller gmbh" },
  { id: "acc_3", name_key: "ff ltd" },
  { id: "acc_4", name_key: "οδος α.ε." },
  { id: "acc_5", name_key: "grosshandel nord gmbh" },
  { id: "acc_6", name_key: "ευρωπαΐκή τράπεζα" },
  { id: "acc_7", name_key: "istanbul gida" },
  { id: "acc_8", name_key: "strasse logistik ag" },
  { id: "acc_9", name_key: "strasse logistik ag" },
  { id: "acc_a", name_key: "istanbul gida" },
];

/** joinedNameWarnings are the warnings a rekeying `migration` (0034, 0042) gives of those accounts: the groups its keys join. */
export const joinedNameWarnings = (migration: string): [string, Record<string, unknown>][] =>
  [
    [{ id: "acc_7", name: "İSTANBUL GIDA" }, { id: "acc_a", name: "Istanbul Gıda" }],
    [{ id: "acc_8", name: "Straße Logistik AG" }, { id: "acc_9", name: "STRASSE LOGISTIK AG" }],
  ].map((accounts) => [
    "migration: these accounts' names are one name under the new case or white space folding, so a batch upsert or crm import of that name without a domain now refuses it as matching several accounts: rename or delete all but one (README, Upgrading)",
    { migration, accounts },
  ]);

/** JOINED_NAME_WARNINGS are the warnings 0034 gives of those accounts. */
export const JOINED_NAME_WARNINGS = joinedNameWarnings("0034_account_name_case_fold.sql");
