package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Parse builds a policy from a policy file's contents, YAML or JSON (JSON
// is read as YAML). The file is at most MaxPolicyBytes and holds exactly
// one document, a mapping. Unknown keys, duplicate keys, YAML aliases and
// values of the wrong kind are errors that name the key and its line.
func Parse(data []byte) (*Policy, error) {
	p, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return p, nil
}

// Load reads and parses the policy file at path.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxPolicyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", path, err)
	}
	return p, nil
}

func parse(data []byte) (*Policy, error) {
	if len(data) > MaxPolicyBytes {
		return nil, fmt.Errorf("file is over the %d-byte limit", MaxPolicyBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty document")
		}
		return nil, yamlError(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, yamlError(err)
	default:
		return nil, fmt.Errorf("line %d: more than one document: a policy file holds one", extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if isNull(root) {
		return nil, errors.New("empty document")
	}
	if err := checkNode(root, specShape, ""); err != nil {
		return nil, err
	}
	var spec Spec
	if err := root.Decode(&spec); err != nil {
		return nil, yamlError(err)
	}
	return build(spec)
}

// yamlError makes a decoder's error plain: no "yaml: " prefix, one line.
func yamlError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return errors.New(strings.Join(te.Errors, "; "))
	}
	return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
}

// shape is what a node of a policy file may hold: a scalar, a mapping with
// fixed keys (fields), a mapping with keys of any name (each value of
// shape elem), or a sequence (each item of shape elem). check, when set,
// checks a scalar's value, so that its error names the value's line; New
// checks the same again for specs built without a file.
type shape struct {
	kind   yaml.Kind
	fields map[string]*shape
	elem   *shape
	check  func(string) error
}

var (
	scalarShape  = &shape{kind: yaml.ScalarNode}
	resultsShape = &shape{kind: yaml.MappingNode, fields: map[string]*shape{
		"ttl":                  scalarShape,
		"erase_after_delivery": scalarShape,
	}}
	specShape = &shape{kind: yaml.MappingNode, fields: map[string]*shape{
		"tools":        {kind: yaml.MappingNode, elem: scalarShape},
		"default_mode": scalarShape,
		"workspaces": {kind: yaml.MappingNode, elem: &shape{kind: yaml.MappingNode, fields: map[string]*shape{
			"mode":    scalarShape,
			"root":    scalarShape,
			"agents":  {kind: yaml.MappingNode, elem: scalarShape},
			"results": resultsShape,
			"notify": {kind: yaml.MappingNode, fields: map[string]*shape{
				"webhook": {kind: yaml.ScalarNode, check: checkWebhook},
			}},
		}}},
		"rules": {kind: yaml.SequenceNode, elem: &shape{kind: yaml.MappingNode, fields: map[string]*shape{
			"name":   scalarShape,
			"when":   scalarShape,
			"action": scalarShape,
			"reason": scalarShape,
		}}},
		"hold_ttl": scalarShape,
		"results":  resultsShape,
	}}
)

var kindNames = map[yaml.Kind]string{
	yaml.ScalarNode:   "a single value",
	yaml.MappingNode:  "a mapping",
	yaml.SequenceNode: "a list",
}

// checkNode checks n against s: kinds, known keys, no duplicate keys and no
// aliases. path names n in errors ("" for the document).
func checkNode(n *yaml.Node, s *shape, path string) error {
	where := path
	if where == "" {
		where = "the document"
	}
	if n.Kind == yaml.AliasNode {
		return fmt.Errorf("line %d: %s: yaml aliases are not allowed in a policy", n.Line, where)
	}
	if n.Kind != s.kind {
		if s.kind != yaml.ScalarNode && isNull(n) {
			return nil // an empty mapping or list
		}
		return fmt.Errorf("line %d: %s must be %s", n.Line, where, kindNames[s.kind])
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if s.check != nil && !isNull(n) {
			if err := s.check(n.Value); err != nil {
				return fmt.Errorf("line %d: %s %w", n.Line, where, err)
			}
		}
	case yaml.MappingNode:
		seen := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: %s: keys must be single values", k.Line, where)
			}
			if line, dup := seen[k.Value]; dup {
				return fmt.Errorf("line %d: duplicate key %q in %s (first at line %d)", k.Line, k.Value, where, line)
			}
			seen[k.Value] = k.Line
			child := s.elem
			if s.fields != nil {
				child = s.fields[k.Value]
				if child == nil {
					return fmt.Errorf("line %d: unknown key %q in %s; known keys: %s",
						k.Line, truncate(k.Value, 80), where, strings.Join(slices.Sorted(maps.Keys(s.fields)), ", "))
				}
			}
			if err := checkNode(v, child, join(path, k.Value)); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			if err := checkNode(item, s.elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func join(path, key string) string {
	key = truncate(key, 80)
	if path == "" {
		return key
	}
	return path + "." + key
}
