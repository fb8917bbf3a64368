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

/** JOINED_NAME_WARNINGS are the warnings 0034 gives of those accounts: the groups its keys join. */
export const JOINED_NAME_WARNINGS: [string, Record<string, unknown>][] = [
  [
    "migration: these accounts' names are one name under the new case folding, so a batch upsert or crm import of that name without a domain now refuses it as matching several accounts: rename or delete all but one (README, Upgrading)",
    { migration: "0034_account_name_case_fold.sql", accounts: [{ id: "acc_7", name: "İSTANBUL GIDA" }, { id: "acc_a", name: "Istanbul Gıda" }] },
  ],
  [
    "migration: these accounts' names are one name under the new case folding, so a batch upsert or crm import of that name without a domain now refuses it as matching several accounts: rename or delete all but one (README, Upgrading)",
    { migration: "0034_account_name_case_fold.sql", accounts: [{ id: "acc_8", name: "Straße Logistik AG" }, { id: "acc_9", name: "STRASSE LOGISTIK AG" }] },
  ],
];
