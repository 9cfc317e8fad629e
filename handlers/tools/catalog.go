package tools

import (
	"sync"

	"github.com/agentworker/agentworker/llm"
)

// encodedCatalog is every tool with the definition the model is offered
// encoded once per process: the schemas never change, and encoding them
// on every model call cost more than the rest of the request.
var encodedCatalog = sync.OnceValues(func() ([]Tool, error) {
	all := catalog()
	for i, t := range all {
		def, err := llm.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters}.Encode()
		if err != nil {
			return nil, err
		}
		all[i].definition = def
	}
	return all, nil
})

// catalog returns every tool. Registries filter it by task type.
func catalog() []Tool {
	return []Tool{
		listFilesTool(),
		readFileTool(),
		searchFilesTool(),
		projectStructureTool(),
		writeFileTool(),
		editFileTool(),
		applyPatchTool(),
		deleteFileTool(),
		moveFileTool(),
		generateImageTool(),
		finishTool(),
		requestInputTool(),
		runCommandTool(),
	}
}

func schema(required []string, props map[string]any) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func strs(desc string) map[string]any {
	return map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": desc}
}

func str(desc string) map[string]any  { return map[string]any{"type": "string", "description": desc} }
func intg(desc string) map[string]any { return map[string]any{"type": "integer", "description": desc} }
func boolean(desc string) map[string]any {
	return map[string]any{"type": "boolean", "description": desc}
}
