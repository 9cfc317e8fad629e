import { Card } from "@repo/ui/card";
import { Tabs } from "@repo/ui/tabs";
import { upper } from "@shared/format";

export const Docs = () => (
  <Tabs>
    <Card title={upper("docs")} href="/docs" />
  </Tabs>
);
