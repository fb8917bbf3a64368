declare module "*.css" {
  const text: string;
  export default text;
}

// Written by scripts/build-console.ts before a binary is compiled; absent in a source checkout.
declare module "*/dist/islands.json" {
  const bundles: Record<string, string>;
  export default bundles;
}
