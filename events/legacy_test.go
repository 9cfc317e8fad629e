package events_test

import (
	"reflect"
	"testing"

	"github.com/agentworker/agentworker/events"
)

func TestParseLegacyLog(t *testing.T) {
	t.Parallel()
	raw := func(line string) events.Payload {
		return events.Log{Level: events.LevelInfo, Message: line, Metadata: map[string]any{"raw": true}}
	}
	move := func(from, to string) events.Payload {
		return events.FileUpdate{Path: to, Op: events.OpMove, FromPath: from, ToPath: to, Summary: "moved " + from + " → " + to}
	}
	tests := []struct {
		name string
		line string
		want events.Payload
	}{
		{name: "SelfRepair", line: "[SelfRepairLoop] Attempt 1/3: build failed: missing import",
			want: events.SelfRepair{AttemptNumber: 1, MaxAttempts: 3, Trigger: "build failed: missing import", Result: "pending"}},
		{name: "SelfRepairNoReason", line: "[SelfRepairLoop] Attempt 2/3",
			want: events.SelfRepair{AttemptNumber: 2, MaxAttempts: 3, Trigger: "legacy self-repair log", Result: "pending"}},
		{name: "SelfRepairAttemptAboveMax", line: "[SelfRepairLoop] Attempt 4/3: x", want: raw("[SelfRepairLoop] Attempt 4/3: x")},
		{name: "SelfRepairNotANumber", line: "[SelfRepairLoop] Attempt one/3: x", want: raw("[SelfRepairLoop] Attempt one/3: x")},
		{name: "MoveArrow", line: "[move] src/old.ts → src/new.ts", want: move("src/old.ts", "src/new.ts")},
		{name: "MoveASCIIArrow", line: "[move] a.txt -> b/a.txt", want: move("a.txt", "b/a.txt")},
		{name: "MoveSurroundingSpace", line: "  [move]   a.txt  →  b.txt  ", want: move("a.txt", "b.txt")},
		{name: "MoveWithoutTarget", line: "[move] a.txt →", want: raw("[move] a.txt →")},
		{name: "MoveWithoutArrow", line: "[move] a.txt b.txt", want: raw("[move] a.txt b.txt")},
		{name: "Rename", line: "[rename] src/old.ts to src/new.ts", want: move("src/old.ts", "src/new.ts")},
		{name: "RenameWithoutTo", line: "[rename] src/old.ts", want: raw("[rename] src/old.ts")},
		{name: "Plain", line: "Generating site…", want: raw("Generating site…")},
		{name: "OtherTag", line: "[Planner] thinking", want: raw("[Planner] thinking")},
		{name: "Empty", line: "", want: raw("")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := events.ParseLegacyLog(tt.line); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseLegacyLog(%q) = %#v, want %#v", tt.line, got, tt.want)
			}
		})
	}
}

func FuzzParseLegacyLog(f *testing.F) {
	for _, s := range []string{"[SelfRepairLoop] Attempt 1/3: x", "[move] a → b", "[rename] a to b", "plain", "[move]  → "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		switch p := events.ParseLegacyLog(line).(type) {
		case events.SelfRepair:
			if p.AttemptNumber < 1 || p.AttemptNumber > p.MaxAttempts || p.Trigger == "" {
				t.Fatalf("bad self_repair %+v from %q", p, line)
			}
		case events.FileUpdate:
			if p.Op != events.OpMove || p.FromPath == "" || p.ToPath == "" || p.Path != p.ToPath {
				t.Fatalf("bad move %+v from %q", p, line)
			}
		case events.Log:
			if p.Message != line || p.Metadata["raw"] != true {
				t.Fatalf("bad raw log %+v from %q", p, line)
			}
		default:
			t.Fatalf("ParseLegacyLog(%q) = %T", line, p)
		}
	})
}
