import { readFile } from "node:fs/promises";
import path from "path";
import { z } from "zod";
import db from "#db";
import { slug } from "./util.js";
import type { User } from "./types.js";
import { helper } from "lib/helper";
import defaults from "./defaults.json" with { type: "json" };

const Input = z.object({ name: z.string() });

export async function load(file: string): Promise<User> {
  const raw = JSON.parse(await readFile(path.resolve(file), "utf8"));
  const input = Input.parse({ ...defaults, ...raw });
  return db.save({ id: slug(input.name), name: helper(input.name) });
}
