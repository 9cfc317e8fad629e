package llm

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Price is what a model charges, in US dollars per 1,000 tokens.
type Price struct {
	InPer1K  float64
	OutPer1K float64
}

// Cost is the price of a usage.
func (p Price) Cost(u Usage) float64 {
	return float64(u.PromptTokens)/1000*p.InPer1K + float64(u.CompletionTokens)/1000*p.OutPer1K
}

// Prices maps a model name to its price.
type Prices map[string]Price

// DefaultPrices are the list prices of common OpenAI models (per 1,000
// tokens, input:output) as of 2025: LLM_PRICES overrides or extends them.
func DefaultPrices() Prices {
	return Prices{
		"gpt-4o":       {0.0025, 0.01},
		"gpt-4o-mini":  {0.00015, 0.0006},
		"gpt-4.1":      {0.002, 0.008},
		"gpt-4.1-mini": {0.0004, 0.0016},
		"gpt-4.1-nano": {0.0001, 0.0004},
		"o3":           {0.002, 0.008},
		"o4-mini":      {0.0011, 0.0044},
	}
}

// Lookup returns the price of model; ok is false for a model not listed,
// which Check refuses.
func (p Prices) Lookup(model string) (Price, bool) {
	pr, ok := p[model]
	return pr, ok
}

// UnpricedError refuses a model the price table does not list: its usage
// would cost nothing, so no cost budget would ever stop it.
type UnpricedError struct {
	Model string
}

func (e *UnpricedError) Error() string {
	return fmt.Sprintf("model %q has no price: the operator must price it in LLM_PRICES (%s=in_per_1k:out_per_1k in dollars, "+
		"or %s=0:0 for a self-hosted model) before a task may use it", e.Model, e.Model, e.Model)
}

// Check returns an *UnpricedError for a model the table does not list.
func (p Prices) Check(model string) error {
	if _, ok := p[model]; !ok {
		return &UnpricedError{Model: model}
	}
	return nil
}

// ParsePrices reads "model=in_per_1k:out_per_1k,..." into a copy of base,
// overriding or adding models.
func ParsePrices(s string, base Prices) (Prices, error) {
	out := Prices{}
	for k, v := range base {
		out[k] = v
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		model, rates, ok := strings.Cut(item, "=")
		in, outRate, ok2 := strings.Cut(rates, ":")
		if !ok || !ok2 || strings.TrimSpace(model) == "" {
			return nil, fmt.Errorf("price %q: want model=in_per_1k:out_per_1k", item)
		}
		pi, err1 := strconv.ParseFloat(strings.TrimSpace(in), 64)
		po, err2 := strconv.ParseFloat(strings.TrimSpace(outRate), 64)
		// NaN would compare false with every budget, so none would stop it.
		if err1 != nil || err2 != nil || !(pi >= 0) || !(po >= 0) || math.IsInf(pi, 0) || math.IsInf(po, 0) {
			return nil, fmt.Errorf("price %q: rates must be finite non-negative numbers", item)
		}
		out[strings.TrimSpace(model)] = Price{InPer1K: pi, OutPer1K: po}
	}
	return out, nil
}
