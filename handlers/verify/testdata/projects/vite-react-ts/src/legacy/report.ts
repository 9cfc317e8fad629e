// Kept from the old app; its helper was never migrated.
import { formatReport } from './report-helper'

export function report(lines: string[]): string {
  return formatReport(lines.join('\n'))
}

export const title = 'Report'
