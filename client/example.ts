import { createCrmClient } from "./index.js";

const crm = createCrmClient({ baseUrl: process.env.CRM_URL!, token: process.env.CRM_TOKEN! });
const rows = [
  { source_id: "row-1", first_name: "Ada", last_name: "Lovelace", email: "ada@example.com", company: "Analytical Engines", domain: "engines.example" },
  { source_id: "row-2", first_name: "Charles", last_name: "Babbage", email: "charles@example.com", company: "Analytical Engines", domain: "engines.example" },
];
// Before a large import, try one record: workflows may trigger from new contacts.
for (const { source_id, company, domain, ...person } of process.argv.includes("--trial") ? rows.slice(0, 1) : rows) {
  // Create or resolve the account first. An Idempotency-Key from a stable source id: a retry creates nothing twice.
  const accounts = await crm.GET("/public/v1/accounts", { params: { query: { domain } } });
  const account = accounts.data?.data[0] ?? (await crm.POST("/public/v1/accounts", { body: { name: company, domain }, params: { header: { "idempotency-key": `account:${domain}` } } })).data?.data;
  // Search by email before creating: the same person may arrive from several sources.
  const existing = (await crm.GET("/public/v1/contacts", { params: { query: { email: person.email } } })).data?.data[0];
  const body = { ...person, account_ids: account ? [account.id] : [] };
  const { data, error } = existing
    ? await crm.PATCH("/public/v1/contacts/{id}", { params: { path: { id: existing.id } }, body })
    : await crm.POST("/public/v1/contacts", { body, params: { header: { "idempotency-key": `contact:${source_id}` } } });
  if (error) throw new Error(`${source_id}: ${error.detail} ${JSON.stringify(error.errors ?? [])}`); // error is a Problem
  console.log(`${source_id} ${existing ? "updated" : "created"} ${data.data.id}`);
}
