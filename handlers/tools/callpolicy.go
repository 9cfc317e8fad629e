package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/agentworker/agentworker/handlers/tools/patch"
)

// Actions of a PolicyRule.
const (
	PolicyAllow = "allow"
	PolicyAsk   = "ask"
	PolicyDeny  = "deny"
)

// PolicyAnyTool is the tool name of a rule that applies to every tool.
const PolicyAnyTool = "*"

// Bounds of a call policy.
const (
	maxPolicyRules  = 100
	maxPolicyMatch  = 300
	maxPolicyReason = 500
)

// PolicyRule is one rule of a call policy: calls of Tool (or of every tool,
// "*") whose argument matches Match (a path glob for the file tools, a
// command name for run_command; empty: every call) get Action.
type PolicyRule struct {
	Tool   string `json:"tool"`
	Match  string `json:"match,omitempty"`
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
}

// CallPolicy is an ordered list of rules: the first rule that matches a
// call decides it; a call no rule matches is allowed. The empty policy
// allows every call the registry allows.
type CallPolicy []PolicyRule

// Decision is what a policy says of one call.
type Decision struct {
	Action string // allow, ask or deny
	Reason string // the deciding rule's
}

// PolicyError is a rule that is not valid: which one and why.
type PolicyError struct {
	Index int // 0-based rule index; -1 for the policy as a whole
	Msg   string
}

func (e *PolicyError) Error() string {
	if e.Index < 0 {
		return "tool_policy: " + e.Msg
	}
	return fmt.Sprintf("tool_policy[%d]: %s", e.Index, e.Msg)
}

// pathTools are the tools whose calls name project paths: a rule's match
// is a path glob for them.
var pathTools = []string{"list_files", "read_file", "search_files", "get_project_structure",
	"write_file", "edit_file", "apply_patch", "delete_file", "move_file", "generate_image"}

// ParseCallPolicy decodes and checks a policy: known tools, actions allow,
// ask or deny, a match only where a call has something to match (a valid
// path glob, or one of run_command's commands), bounded sizes. null and an
// absent policy are the empty one.
func ParseCallPolicy(raw json.RawMessage) (CallPolicy, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var p CallPolicy
	if err := dec.Decode(&p); err != nil {
		return nil, &PolicyError{Index: -1, Msg: `must be a list of {"tool", "match", "action", "reason"}: ` + err.Error()}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Validate checks every rule; the error is a *PolicyError.
func (p CallPolicy) Validate() error {
	if len(p) > maxPolicyRules {
		return &PolicyError{Index: -1, Msg: fmt.Sprintf("%d rules; at most %d", len(p), maxPolicyRules)}
	}
	known := policyTools()
	for i, r := range p {
		switch {
		case LoopControl(r.Tool):
			return &PolicyError{Index: i, Msg: fmt.Sprintf("tool %s steers the loop and is always allowed; a policy cannot name it", r.Tool)}
		case r.Tool != PolicyAnyTool && !slices.Contains(known, r.Tool):
			return &PolicyError{Index: i, Msg: fmt.Sprintf("tool %q is not a tool; use \"*\" or one of %s", r.Tool, strings.Join(known, ", "))}
		case r.Action != PolicyAllow && r.Action != PolicyAsk && r.Action != PolicyDeny:
			return &PolicyError{Index: i, Msg: fmt.Sprintf("action %q: want allow, ask or deny", r.Action)}
		case len(r.Reason) > maxPolicyReason:
			return &PolicyError{Index: i, Msg: fmt.Sprintf("reason is %d bytes; at most %d", len(r.Reason), maxPolicyReason)}
		case r.Match == "":
			continue
		case len(r.Match) > maxPolicyMatch:
			return &PolicyError{Index: i, Msg: fmt.Sprintf("match is %d bytes; at most %d", len(r.Match), maxPolicyMatch)}
		case r.Tool == RunCommand:
			if _, err := path.Match(r.Match, ""); err != nil {
				return &PolicyError{Index: i, Msg: fmt.Sprintf("match %q is not a valid command pattern: %v", r.Match, err)}
			}
		case r.Tool == PolicyAnyTool || slices.Contains(pathTools, r.Tool):
			if err := checkGlob(r.Match); err != nil {
				return &PolicyError{Index: i, Msg: fmt.Sprintf("match %q is not a valid path glob: %v", r.Match, err)}
			}
		default:
			return &PolicyError{Index: i, Msg: fmt.Sprintf("tool %s takes no match: a match is a path glob for the file tools and a command for run_command", r.Tool)}
		}
	}
	return nil
}

// LoopControl reports whether a tool steers the loop (finish,
// request_input): no policy decides its calls.
func LoopControl(name string) bool { return name == "finish" || name == "request_input" }

// policyTools are the tools a rule may name.
func policyTools() []string {
	r, err := ForTaskType("build")
	if err != nil {
		return nil
	}
	return slices.DeleteFunc(r.Names(), LoopControl)
}

// PolicyToolNames lists the tools a rule may name, for the SQL check to
// agree with.
func PolicyToolNames() []string { return policyTools() }

// strictness orders actions: the stricter wins where two policies meet.
func strictness(action string) int {
	switch action {
	case PolicyDeny:
		return 2
	case PolicyAsk:
		return 1
	}
	return 0
}

// Stricter returns the stricter of two decisions (deny, then ask, then
// allow): how a task's policy narrows its agent's.
func Stricter(a, b Decision) Decision {
	if strictness(b.Action) > strictness(a.Action) {
		return b
	}
	return a
}

// Decide returns the policy's decision for a call. A call that names
// several paths (a move, a patch) is decided for each, and the strictest
// decision holds.
func (p CallPolicy) Decide(name, arguments string) Decision {
	allow := Decision{Action: PolicyAllow}
	if len(p) == 0 {
		return allow
	}
	subjects := callSubjects(name, arguments)
	if len(subjects) == 0 {
		return p.first(name, "", false)
	}
	d := allow
	for _, s := range subjects {
		d = Stricter(d, p.first(name, s, true))
	}
	return d
}

// first is the decision of the first rule that matches a call of tool
// name about subject (a path or a command; has says there is one).
func (p CallPolicy) first(name, subject string, has bool) Decision {
	for _, r := range p {
		if r.Tool != PolicyAnyTool && r.Tool != name {
			continue
		}
		if r.Match != "" {
			if !has {
				continue
			}
			var ok bool
			if name == RunCommand {
				ok, _ = path.Match(r.Match, subject)
			} else {
				ok = globMatch(r.Match, subject)
			}
			if !ok {
				continue
			}
		}
		return Decision{Action: r.Action, Reason: r.Reason}
	}
	return Decision{Action: PolicyAllow}
}

// callSubjects are what a call's rules match against: the project paths it
// names (cleaned, relative), or run_command's command.
func callSubjects(name, arguments string) []string {
	var args struct {
		Path     string `json:"path"`
		FromPath string `json:"fromPath"`
		ToPath   string `json:"toPath"`
		Patch    string `json:"patch"`
		Command  string `json:"command"`
	}
	// Arguments that do not decode name nothing; the tool refuses them.
	_ = json.Unmarshal([]byte(arguments), &args)
	if name == RunCommand {
		if args.Command == "" {
			return nil
		}
		return []string{args.Command}
	}
	var out []string
	add := func(p string) {
		if p == "" {
			return
		}
		c := strings.TrimPrefix(path.Clean("/"+p), "/")
		if c == "" {
			c = "."
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	add(args.Path)
	add(args.FromPath)
	add(args.ToPath)
	if name == "apply_patch" && args.Patch != "" {
		if ops, err := patch.Parse(args.Patch); err == nil {
			for _, op := range ops {
				add(op.Path)
				add(op.MoveTo)
			}
		}
	}
	return out
}
