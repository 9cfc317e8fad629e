export const site = { name: "Web", url: "https://example.com" };
