// The page's two DOM helpers, shared by its modules.

// $ is the element of an id.
export const $ = (id) => document.getElementById(id);

// el makes an element: props set its class, dataset (data) and properties
// (text goes in as textContent, never as HTML); children are appended.
export const el = (tag, props = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") e.className = v;
    else if (k === "data") Object.assign(e.dataset, v);
    else e[k] = v;
  }
  e.append(...children);
  return e;
};
