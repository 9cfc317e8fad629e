package events

import (
	"regexp"
	"strconv"
	"strings"
)

// selfRepairLine matches "[SelfRepairLoop] Attempt 1/3: reason".
var selfRepairLine = regexp.MustCompile(`^\[SelfRepairLoop\]\s*Attempt\s+(\d+)\s*/\s*(\d+)\s*:?\s*(.*)$`)

// ParseLegacyLog turns one log line of the old TypeScript worker into a
// typed event (agent-events-spec.md §8):
//
//	[SelfRepairLoop] Attempt 1/3: …   → SelfRepair (result pending)
//	[move] a → b, [move] a -> b       → FileUpdate{Op: move}
//	[rename] a to b                   → FileUpdate{Op: move}
//
// Anything else, including a malformed line of those forms, becomes a Log
// at level info with metadata.raw = true and the line as its message.
func ParseLegacyLog(line string) Payload {
	trimmed := strings.TrimSpace(line)
	if m := selfRepairLine.FindStringSubmatch(trimmed); m != nil {
		attempt, err1 := strconv.Atoi(m[1])
		maxAttempts, err2 := strconv.Atoi(m[2])
		if err1 == nil && err2 == nil && attempt >= 1 && maxAttempts >= attempt {
			trigger := strings.TrimSpace(m[3])
			if trigger == "" {
				trigger = "legacy self-repair log"
			}
			return SelfRepair{AttemptNumber: attempt, MaxAttempts: maxAttempts, Trigger: trigger, Result: "pending"}
		}
	}
	if rest, ok := strings.CutPrefix(trimmed, "[move]"); ok {
		for _, sep := range []string{" → ", " -> "} {
			if from, to, ok := cutPaths(rest, sep); ok {
				return moveUpdate(from, to)
			}
		}
	}
	if rest, ok := strings.CutPrefix(trimmed, "[rename]"); ok {
		if from, to, ok := cutPaths(rest, " to "); ok {
			return moveUpdate(from, to)
		}
	}
	return Log{Level: LevelInfo, Message: line, Metadata: map[string]any{"raw": true}}
}

func cutPaths(s, sep string) (from, to string, ok bool) {
	from, to, ok = strings.Cut(s, sep)
	from, to = strings.TrimSpace(from), strings.TrimSpace(to)
	return from, to, ok && from != "" && to != "" && !strings.ContainsAny(from+to, "\n\r")
}

func moveUpdate(from, to string) FileUpdate {
	return FileUpdate{Path: to, Op: OpMove, FromPath: from, ToPath: to, Summary: "moved " + from + " → " + to}
}
