package llm_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/agentworker/agentworker/llm"
)

func TestParsePrices(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		model   string
		want    llm.Price
		wantErr bool
	}{
		{name: "DefaultsKept", in: "", model: "gpt-4o-mini", want: llm.Price{InPer1K: 0.00015, OutPer1K: 0.0006}},
		{name: "Override", in: "gpt-4o-mini=0.1:0.2", model: "gpt-4o-mini", want: llm.Price{InPer1K: 0.1, OutPer1K: 0.2}},
		{name: "Added", in: " local = 0 : 0.5 ,other=1:1", model: "local", want: llm.Price{OutPer1K: 0.5}},
		{name: "MissingRate", in: "m=0.1", wantErr: true},
		{name: "Negative", in: "m=-1:1", wantErr: true},
		{name: "NoModel", in: "=1:1", wantErr: true},
		{name: "NotANumber", in: "m=a:1", wantErr: true},
		{name: "NaN", in: "m=NaN:1", wantErr: true},
		{name: "Infinite", in: "m=1:+Inf", wantErr: true},
		{name: "SelfHostedAtZero", in: "llama=0:0", model: "llama", want: llm.Price{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := llm.ParsePrices(tt.in, llm.DefaultPrices())
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParsePrices(%q) = %v, want an error", tt.in, p)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := p.Lookup(tt.model); !ok || got != tt.want {
				t.Errorf("price of %s = %+v, %v; want %+v", tt.model, got, ok, tt.want)
			}
		})
	}
}

func TestPriceCost(t *testing.T) {
	t.Parallel()
	got := llm.Price{InPer1K: 0.5, OutPer1K: 1.5}.Cost(llm.Usage{PromptTokens: 2000, CompletionTokens: 1000})
	if math.Abs(got-2.5) > 1e-9 {
		t.Errorf("cost = %v, want 2.5", got)
	}
}

// TestCheckRefusesUnpriced: a model the table does not list is refused with
// an *UnpricedError naming it and LLM_PRICES; a listed one, even at 0, is
// not.
func TestCheckRefusesUnpriced(t *testing.T) {
	t.Parallel()
	p, err := llm.ParsePrices("llama=0:0", llm.DefaultPrices())
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"gpt-4o-mini", "llama"} {
		if err := p.Check(model); err != nil {
			t.Errorf("Check(%q) = %v", model, err)
		}
	}
	err = p.Check("o1-pro")
	var ue *llm.UnpricedError
	if !errors.As(err, &ue) || ue.Model != "o1-pro" || !strings.Contains(err.Error(), "LLM_PRICES") {
		t.Errorf("Check(o1-pro) = %v, want an *UnpricedError naming LLM_PRICES", err)
	}
}
