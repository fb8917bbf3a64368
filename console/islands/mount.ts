import { h, hydrate, type ComponentType } from "preact";

/** hydrateIsland brings the server-rendered [data-island=NAME] element to life with its JSON props. */
export function hydrateIsland<P>(name: string, component: ComponentType<P>): void {
  for (const element of document.querySelectorAll<HTMLElement>(`[data-island="${name}"]`)) {
    const propsBlock = element.dataset.props ? document.getElementById(element.dataset.props) : null;
    const props = JSON.parse(propsBlock?.textContent ?? "{}") as P;
    hydrate(h(component as ComponentType<object>, props as object), element);
  }
}
