package handlers

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// TestBudgetWithinCeiling: input.budget may lower the operator's limits,
// never raise them; where the operator set none, it sets its own.
func TestBudgetWithinCeiling(t *testing.T) {
	t.Parallel()
	limited := Config{MaxIterations: 25, Budget: Budget{MaxTokens: 10_000, MaxCostUSD: 1}}
	unlimited := Config{MaxIterations: 25}
	tests := []struct {
		name  string
		cfg   Config
		input string
		want  Budget
	}{
		{"NoInput", limited, `{}`, Budget{MaxTokens: 10_000, MaxCostUSD: 1, MaxIterations: 25}},
		{"Lower", limited, `{"budget": {"max_tokens": 500, "max_cost_usd": 0.1, "max_iterations": 3}}`,
			Budget{MaxTokens: 500, MaxCostUSD: 0.1, MaxIterations: 3}},
		{"HigherIsCapped", limited, `{"budget": {"max_tokens": 1000000000, "max_cost_usd": 500, "max_iterations": 1000}}`,
			Budget{MaxTokens: 10_000, MaxCostUSD: 1, MaxIterations: 25}},
		{"ZeroKeepsCeiling", limited, `{"budget": {"max_tokens": 0, "max_cost_usd": 0, "max_iterations": 0}}`,
			Budget{MaxTokens: 10_000, MaxCostUSD: 1, MaxIterations: 25}},
		{"NoCeilingTakesInput", unlimited, `{"budget": {"max_tokens": 1000000000, "max_cost_usd": 500}}`,
			Budget{MaxTokens: 1e9, MaxCostUSD: 500, MaxIterations: 25}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &Runner{cfg: tt.cfg}
			p, err := r.inputPolicy(uuid.New(), json.RawMessage(tt.input))
			if err != nil {
				t.Fatal(err)
			}
			if p.budget != tt.want {
				t.Errorf("budget = %+v, want %+v", p.budget, tt.want)
			}
		})
	}
}

// TestBudgetSuspensionAtCeiling: a budget spent at the operator's ceiling
// does not tell the user to raise input.budget, which could not help.
func TestBudgetSuspensionAtCeiling(t *testing.T) {
	t.Parallel()
	ceiling := Budget{MaxTokens: 100, MaxCostUSD: 1, MaxIterations: 5}
	tests := []struct {
		name      string
		lp        loop
		code      string
		atCeiling bool
	}{
		{"IterationsAtCeiling", loop{iterations: 5, maxIterations: 5, ceiling: ceiling}, "budget_max_iterations", true},
		{"IterationsBelow", loop{iterations: 2, maxIterations: 2, ceiling: ceiling}, "budget_max_iterations", false},
		{"TokensAtCeiling", loop{maxIterations: 5, budget: ceiling, ceiling: ceiling}, "budget_max_tokens", true},
		{"CostBelow", loop{maxIterations: 5, budget: Budget{MaxCostUSD: 0.5}, ceiling: ceiling, cost: 0.6}, "budget_max_cost", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lp := tt.lp
			lp.usage.TotalTokens = 100
			s := lp.spent()
			if s == nil || s.Code != tt.code {
				t.Fatalf("spent() = %+v, want code %s", s, tt.code)
			}
			if got := !strings.Contains(s.Message, "raise input.budget"); got != tt.atCeiling {
				t.Errorf("message %q: at ceiling %v, want %v", s.Message, got, tt.atCeiling)
			}
		})
	}
}
