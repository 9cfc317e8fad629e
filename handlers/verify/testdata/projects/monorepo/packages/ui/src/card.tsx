import { type JSX } from "react";

export function Card({ title, href }: { title: string; href: string }): JSX.Element {
  return (
    <a href={href} rel="noopener noreferrer" target="_blank">
      <h2>{title}</h2>
    </a>
  );
}
