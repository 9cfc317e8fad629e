package scripted

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/agentworker/agentworker/llm"
)

// Reply is one scripted answer.
type Reply struct {
	// Content is the assistant's text.
	Content string
	// ToolCalls are the calls the assistant asks for. Arguments is sent as
	// is and may be deliberately malformed JSON. An empty ID is replaced by
	// "call_<n>", n counting the tool calls the server has answered with.
	ToolCalls []llm.ToolCall
	// Status, when not zero, makes the server answer with this HTTP error
	// status (e.g. 429, 500, 400) instead of a completion.
	Status int
	// RetryAfter is the Retry-After header sent with an error status.
	RetryAfter string
	// ErrorMessage is the error's message. Defaults to the status text.
	ErrorMessage string
	// ErrorCode is the error's type and code. Defaults to the status's
	// usual ones (rate_limit_exceeded for 429).
	ErrorCode string
	// Usage is the token usage reported. Defaults to a rough count derived
	// from the text lengths of the request and the answer.
	Usage *llm.Usage
	// Delay is waited before answering. The wait ends early, with no
	// answer, when the client goes away.
	Delay time.Duration
}

// Responder chooses the reply to a request. Respond may be called from
// several goroutines at once.
type Responder interface {
	Respond(req *Request) Reply
}

// Func adapts a function to a Responder.
type Func func(req *Request) Reply

// Respond calls f(req).
func (f Func) Respond(req *Request) Reply { return f(req) }

// Queue returns a Responder that answers with replies in order, one per
// request. Once they are used up it answers every request with a 500 error
// whose message starts with "script exhausted".
func Queue(replies ...Reply) Responder {
	return &queue{replies: replies}
}

type queue struct {
	mu      sync.Mutex
	replies []Reply
	served  int
}

func (q *queue) Respond(*Request) Reply {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.served++
	if len(q.replies) == 0 {
		return Reply{
			Status:       http.StatusInternalServerError,
			ErrorMessage: fmt.Sprintf("script exhausted: no reply left for request %d", q.served),
		}
	}
	r := q.replies[0]
	q.replies = q.replies[1:]
	return r
}
