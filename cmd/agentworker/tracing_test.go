package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentworker/agentworker/api"
	"github.com/agentworker/agentworker/internal/devenv/localjaeger"
	"github.com/agentworker/agentworker/internal/devenv/loopback"
	"github.com/agentworker/agentworker/llm"
	agentsql "github.com/agentworker/agentworker/sql"
	"github.com/agentworker/agentworker/testing/jaegertest"
	"github.com/agentworker/agentworker/testing/llmtest"
	"github.com/agentworker/agentworker/testing/poll"
	"github.com/agentworker/agentworker/traceid"
)

var traceOut = flag.String("tracing.out", "", "write the build's trace, as Jaeger's query API answers it, to this file (the picture in docs/operations.md is drawn from it)")

// jaegerSpan is a span as Jaeger's query API (/api/traces/<id>) shows it.
type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

func (s jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

func (s jaegerSpan) tag(key string) string {
	for _, tg := range s.Tags {
		if tg.Key == key {
			return fmt.Sprint(tg.Value)
		}
	}
	return ""
}

// jaegerTrace reads trace id's spans from Jaeger's query API (none while
// it has not stored the trace).
func jaegerTrace(t *testing.T, j *localjaeger.Server, id string) []jaegerSpan {
	t.Helper()
	resp, err := http.Get(j.Query + "/api/traces/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET trace %s: status %d, %v", id, resp.StatusCode, err)
	}
	var body struct {
		Data []struct {
			Spans []jaegerSpan `json:"spans"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("GET trace %s: %v", id, err)
	}
	if *traceOut != "" {
		if err := os.WriteFile(*traceOut, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(body.Data) == 0 {
		return nil
	}
	return body.Data[0].Spans
}

// TestTracingEndToEnd runs `agentworker serve` exporting to a real OTLP
// receiver (Jaeger) and one build created through the API with a W3C
// traceparent, then reads the build's trace back from Jaeger: the
// request's span is the child of the caller's, the attempt's invoke_agent
// span the child of the request's, and under it the claim, a chat span per
// model call with the model's token counts, an execute_tool span per tool
// call with the tool's name, and the apply. The trace id is the one sent,
// which the task stores too. No span carries what the build wrote. The
// token usage and call duration reach the receiver as the GenAI metrics.
func TestTracingEndToEnd(t *testing.T) {
	t.Parallel()
	j := jaegertest.Start(t)
	const secret, content = "tracing-test-secret-0123456789", "distinctive-content-4411\n"
	usage := []llm.Usage{{PromptTokens: 1101, CompletionTokens: 11, TotalTokens: 1112}, {PromptTokens: 1202, CompletionTokens: 22, TotalTokens: 1224}}
	write := llmtest.Call("write_file", map[string]string{"path": "hello.txt", "content": content})
	write.Usage = &usage[0]
	finish := llmtest.Call("finish", map[string]string{"summary": "wrote hello.txt"})
	finish.Usage = &usage[1]
	e := newProcEnv(t, write, finish)
	port, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	service := "agentworker-test-" + uuid.NewString()[:8]
	e.env = append(e.env, "JWT_SECRET="+secret, "RUN_COMMAND=off", fmt.Sprintf("HTTP_ADDR=127.0.0.1:%d", port),
		"OTEL_EXPORTER_OTLP_ENDPOINT="+j.OTLPHTTP, "OTEL_SERVICE_NAME="+service,
		"OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_METRIC_EXPORT_INTERVAL=200")
	e.start(t, 30*time.Second)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	poll.Until(t, "serve answers", 30*time.Second, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})

	project := uuid.New()
	token := operatorToken(t, secret, project)
	trace, caller := strings.ReplaceAll(uuid.NewString(), "-", ""), "00f067aa0ba902b7"
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/projects/"+project.String()+"/tasks",
		strings.NewReader(`{"type": "build", "prompt": "write hello.txt"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+trace+"-"+caller+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var view api.TaskView
	err = json.NewDecoder(resp.Body).Decode(&view)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create task: status %d, %v", resp.StatusCode, err)
	}
	if got := resp.Header.Get(traceid.Header); got != trace {
		t.Errorf("X-Trace-ID %q, want the traceparent's trace %s", got, trace)
	}
	poll.Until(t, "the build succeeds", 60*time.Second, func() bool {
		return e.task(t, view.ID).Status == agentsql.StatusSucceeded
	})
	task := e.task(t, view.ID)
	if task.TraceID != trace {
		t.Errorf("the task stores trace %q, want the traceparent's %s", task.TraceID, trace)
	}

	var spans []jaegerSpan
	poll.Until(t, "Jaeger holds the build's trace", 30*time.Second, func() bool {
		spans = jaegerTrace(t, j, trace)
		return slices.ContainsFunc(spans, func(s jaegerSpan) bool { return strings.HasPrefix(s.OperationName, "invoke_agent") }) &&
			slices.ContainsFunc(spans, func(s jaegerSpan) bool { return s.OperationName == "apply" })
	})
	byName := map[string][]jaegerSpan{}
	for _, s := range spans {
		byName[s.OperationName] = append(byName[s.OperationName], s)
		for _, tg := range s.Tags {
			if strings.Contains(fmt.Sprint(tg.Value), strings.TrimSpace(content)) {
				t.Errorf("span %s tag %s carries the file's content", s.OperationName, tg.Key)
			}
		}
	}
	one := func(name string) jaegerSpan {
		t.Helper()
		if len(byName[name]) != 1 {
			t.Fatalf("%d spans %q in the trace, which holds %v", len(byName[name]), name, slices.Sorted(maps.Keys(byName)))
		}
		return byName[name][0]
	}
	request := one("POST /v1/projects/{id}/tasks")
	if request.parent() != caller {
		t.Errorf("the request's span is the child of %q, want the caller's span %s", request.parent(), caller)
	}
	if task.TraceParent != request.SpanID {
		t.Errorf("the task stores trace parent %q, want the request's span %s", task.TraceParent, request.SpanID)
	}
	attempt := one("invoke_agent build")
	if attempt.parent() != request.SpanID {
		t.Errorf("invoke_agent is the child of %q, want the request's span %s", attempt.parent(), request.SpanID)
	}
	if attempt.tag("gen_ai.operation.name") != "invoke_agent" || attempt.tag("agentworker.task.id") != task.ID.String() {
		t.Errorf("invoke_agent tags %v", attempt.Tags)
	}
	under := func(s jaegerSpan) {
		t.Helper()
		if s.parent() != attempt.SpanID {
			t.Errorf("%s is the child of %q, want invoke_agent %s", s.OperationName, s.parent(), attempt.SpanID)
		}
	}
	under(one("claim"))
	under(one("apply"))
	chats := byName["chat "+llmtest.Model]
	var got []string
	for _, c := range chats {
		under(c)
		if c.tag("gen_ai.operation.name") != "chat" || c.tag("gen_ai.provider.name") != "openai" ||
			c.tag("gen_ai.request.model") != llmtest.Model || c.tag("gen_ai.response.model") == "" ||
			!strings.Contains(c.tag("gen_ai.response.finish_reasons"), "tool_calls") {
			t.Errorf("chat span tags %v", c.Tags)
		}
		got = append(got, c.tag("gen_ai.usage.input_tokens")+"/"+c.tag("gen_ai.usage.output_tokens"))
	}
	slices.Sort(got)
	if want := []string{"1101/11", "1202/22"}; !slices.Equal(got, want) {
		t.Errorf("chat spans' input/output tokens %v, want the model's usage %v", got, want)
	}
	var tools []string
	for _, s := range spans {
		if strings.HasPrefix(s.OperationName, "execute_tool ") {
			under(s)
			tools = append(tools, s.tag("gen_ai.tool.name")+":"+s.tag("agentworker.tool.outcome"))
			if s.OperationName != "execute_tool "+s.tag("gen_ai.tool.name") {
				t.Errorf("span %q names tool %q", s.OperationName, s.tag("gen_ai.tool.name"))
			}
		}
	}
	slices.Sort(tools)
	if want := []string{"finish:success", "write_file:success"}; !slices.Equal(tools, want) {
		t.Errorf("execute_tool spans %v, want %v", tools, want)
	}

	// The metrics, as the receiver passed them on to Prometheus.
	poll.Until(t, "the receiver holds the token usage", 30*time.Second, func() bool {
		sums := genAIMetrics(t, j.Metrics, service)
		return sums["token.input"] == 2303 && sums["token.output"] == 33 && sums["duration.count"] == 2
	})
}

// genAIMetrics reads the GenAI histograms' sums (token.input,
// token.output) and the calls counted by the duration histogram
// (duration.count) of service from a Prometheus page.
func genAIMetrics(t *testing.T, url, service string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tokenSum := regexp.MustCompile(`^gen_ai_client_token_usage(?:_[a-z]+)?_sum\{(.*)\} (\S+)$`)
	durationCount := regexp.MustCompile(`^gen_ai_client_operation_duration(?:_seconds)?_count\{(.*)\} (\S+)$`)
	sums := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"`+service+`"`) {
			continue
		}
		if m := tokenSum.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			for _, typ := range []string{"input", "output"} {
				if strings.Contains(m[1], `gen_ai_token_type="`+typ+`"`) {
					sums["token."+typ] += v
				}
			}
		}
		if m := durationCount.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			sums["duration.count"] += v
		}
	}
	return sums
}
