package events_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentworker/agentworker/events"
)

// Format renders one stored event as a terminal line; Terminal says whether
// the task's timeline ends with it.
func ExampleFormat() {
	payload, _ := json.Marshal(events.FileUpdate{Path: "src/new.ts", Op: events.OpMove, FromPath: "src/old.ts", ToPath: "src/new.ts"})
	ev := events.Event{Seq: 12, Type: events.TypeFileUpdate, Payload: payload,
		CreatedAt: time.Date(2026, 11, 22, 9, 30, 0, 0, time.UTC)}
	fmt.Println(events.Format(ev))
	fmt.Println(events.Terminal(ev))
	// Output:
	// #12   09:30:00.000 file_update move src/old.ts → src/new.ts
	// false
}
