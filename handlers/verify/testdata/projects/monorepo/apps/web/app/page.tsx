import { Button } from "@repo/ui/button";
import { percent } from "@repo/utils";
import { site } from "@/lib/site";

export default function Page() {
  return (
    <main>
      <h1>{site.name}</h1>
      <p>{percent(42)}</p>
      <Button appName="web">Open alert</Button>
    </main>
  );
}
