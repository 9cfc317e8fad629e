package redact

// ApplyRulesForTest runs every rule, without the trigger pre-check.
var ApplyRulesForTest = applyRules
