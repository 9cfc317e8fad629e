// Markdown (tasks.md, the project's documents) rendered for reading: marked
// makes HTML of it, DOMPurify keeps only safe HTML of that (no script, no
// event handler, no javascript: link, no form), and the result is added as
// nodes, never assigned as HTML. Both libraries are vendored (vendor/).
import { marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.js";

// A link leaves the console in a new tab, telling nothing of it; a box (a
// task list's) only shows, it is never ticked here.
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
  if (node.tagName === "INPUT") {
    if (node.getAttribute("type") !== "checkbox") node.remove();
    else node.setAttribute("disabled", "");
  }
});

// frontMatter is a YAML front matter block at the very start of a file:
// what the documents index reads, not what a person reads.
const frontMatter = /^---\r?\n[\s\S]*?\r?\n---[ \t]*(?:\r?\n|$)/;

// renderMarkdown replaces box's content with text rendered as Markdown,
// without its front matter.
export function renderMarkdown(box, text) {
  const html = marked.parse(text.replace(frontMatter, ""), { async: false, gfm: true });
  const safe = DOMPurify.sanitize(html, { USE_PROFILES: { html: true }, FORBID_TAGS: ["style", "form", "button", "textarea", "select"],
    RETURN_DOM_FRAGMENT: true });
  box.replaceChildren(safe);
  box.classList.add("markdown");
}

// isMarkdown says whether a path names a Markdown file.
export const isMarkdown = (path) => /\.(md|markdown|mdx)$/i.test(path);
