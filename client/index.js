// The CRM API's typed client: openapi-fetch over the types generated from the served OpenAPI
// document (schema.d.ts, by `npm run client:generate`). Plain JavaScript with its types in
// index.d.ts, so Node runs it from node_modules as it is.
import createClient from "openapi-fetch";

/** createCrmClient answers a client whose GET/POST/PATCH/DELETE take the API's paths and send the token. */
export function createCrmClient({ baseUrl, token, fetch }) {
  return createClient({ baseUrl: baseUrl.replace(/\/+$/, ""), headers: { authorization: `Bearer ${token}` }, ...(fetch ? { fetch } : {}) });
}
