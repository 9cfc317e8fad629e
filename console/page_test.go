package console_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentworker/agentworker/console"
	"github.com/agentworker/agentworker/llm/scripted"
	"github.com/agentworker/agentworker/testing/llmtest"
)

// TestWelcomeInChromium: a page without a token says how to get one and
// keeps Run disabled; a token without a subject is named as the audit log
// names its bearer.
func TestWelcomeInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	srv := httptest.NewServer(console.Handler())
	t.Cleanup(srv.Close)
	ctx := browse(t, 60*time.Second)
	run(t, ctx, "open the page without a token", chromedp.Navigate(srv.URL), visible(`#welcome`))
	var got struct {
		Welcome  string   `json:"welcome"`
		Disabled bool     `json:"disabled"`
		Names    []string `json:"names"`
	}
	eval(t, ctx, `import("/api.js").then(({ describeToken }) => {
		const jwt = (claims) => "x." + btoa(JSON.stringify(claims)).replace(/=+$/, "") + ".y";
		return { welcome: document.getElementById("welcome").textContent, disabled: document.getElementById("submit").disabled,
			names: [describeToken(jwt({ sub: "ana", projects: ["p1"] })), describeToken(jwt({ projects: ["p1"] })),
				describeToken(jwt({ role: "service_role" }))] };
	})`, &got)
	if !strings.Contains(got.Welcome, "agentworker token --project <project id> --subject <your name>") || !got.Disabled {
		t.Errorf("without a token: welcome %q, Run disabled %v", got.Welcome, got.Disabled)
	}
	want := []string{"as ana (token for project p1)", "as api (the token names no subject) (token for project p1)", "as role:service_role (service token: every project)"}
	if strings.Join(got.Names, "|") != strings.Join(want, "|") {
		t.Errorf("tokens named %q, want %q", got.Names, want)
	}
	screenshot(t, ctx, "page-welcome")
}

// TestNoTaskOpenInChromium: with a project open and no task selected the
// middle column says what to do instead of standing empty, the welcome
// is gone, Run is enabled, and a line of metadata breaks between words.
func TestNoTaskOpenInChromium(t *testing.T) {
	t.Parallel()
	chromium(t)
	c := newConsole(t, scripted.Func(func(*scripted.Request) scripted.Reply { return llmtest.Text("hi") }))
	ctx := browse(t, 60*time.Second)
	run(t, ctx, "open the project", chromedp.Navigate(c.page()), visible(`body[data-project-conn="live"]`), visible(`#task-empty`), enabled(`#submit`))
	var got struct {
		Welcome bool   `json:"welcome"`
		Wrap    string `json:"wrap"`
		Break   string `json:"break"`
	}
	eval(t, ctx, `({ welcome: !document.getElementById("welcome").hidden,
		wrap: getComputedStyle(document.getElementById("task-meta")).overflowWrap,
		break: getComputedStyle(document.getElementById("task-meta")).wordBreak })`, &got)
	if got.Welcome || got.Wrap != "anywhere" || got.Break != "normal" {
		t.Errorf("with a project open: welcome shown %v, meta wraps %q, breaks %q", got.Welcome, got.Wrap, got.Break)
	}
	screenshot(t, ctx, "page-no-task")
}
