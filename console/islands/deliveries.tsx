/** @jsxImportSource preact */
import { DeliveriesLive } from "../pages/deliveries-live.tsx";
import { hydrateIsland } from "./mount.ts";

hydrateIsland("deliveries", DeliveriesLive);
