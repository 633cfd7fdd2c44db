#!/usr/bin/env python3
"""Validates `fsdpsim COMMAND --json` lines against docs/cli-json.schema.json.

The schema is standard JSON Schema (draft 2020-12); this checker implements
the part of it the schema uses (type, const, enum, properties, required,
additionalProperties, items, pattern, oneOf, local $ref), with the standard
library only, so the test runs without the jsonschema package. A keyword it
does not implement is an error, not a silent pass.

Usage: json_schema_check.py SCHEMA [FILE...]   (standard input without FILE)
Prints each invalid line's problems and exits 1 when there are any.
"""
import json
import re
import sys

ANNOTATIONS = {"$schema", "$id", "title", "description"}
KEYWORDS = {"type", "const", "enum", "properties", "required", "additionalProperties", "items", "pattern", "oneOf", "$ref", "$defs"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    # JSON has one number type; bool is not a number (Python's bool is an int).
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


class Validator:
    def __init__(self, schema):
        self.root = schema

    def resolve(self, ref):
        if not ref.startswith("#/"):
            raise ValueError("only local $ref is supported: " + ref)
        node = self.root
        for part in ref[2:].split("/"):
            node = node[part]
        return node

    def errors(self, schema, value, path="$"):
        """Every problem of `value` against `schema`, as 'path: what'."""
        unknown = set(schema) - KEYWORDS - ANNOTATIONS
        if unknown:
            raise ValueError("schema keyword(s) this checker does not implement: %s" % sorted(unknown))
        out = []
        if "$ref" in schema:
            out += self.errors(self.resolve(schema["$ref"]), value, path)
        if "type" in schema:
            names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(TYPES[n](value) for n in names):
                return out + ["%s: expected %s, got %s" % (path, " or ".join(names), json.dumps(value)[:80])]
        if "const" in schema and value != schema["const"]:
            out.append("%s: expected %s, got %s" % (path, json.dumps(schema["const"]), json.dumps(value)[:80]))
        if "enum" in schema and value not in schema["enum"]:
            out.append("%s: %s is not one of %s" % (path, json.dumps(value)[:80], schema["enum"]))
        if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
            out.append("%s: %s does not match %s" % (path, json.dumps(value)[:80], schema["pattern"]))
        if isinstance(value, dict):
            props = schema.get("properties", {})
            for key in schema.get("required", []):
                if key not in value:
                    out.append("%s: missing required key %s" % (path, json.dumps(key)))
            extra = schema.get("additionalProperties", True)
            for key, v in value.items():
                sub = "%s.%s" % (path, key)
                if key in props:
                    out += self.errors(props[key], v, sub)
                elif extra is False:
                    out.append("%s: key not in the schema" % sub)
                elif isinstance(extra, dict):
                    out += self.errors(extra, v, sub)
        if isinstance(value, list) and "items" in schema:
            for i, v in enumerate(value):
                out += self.errors(schema["items"], v, "%s[%d]" % (path, i))
        if "oneOf" in schema:
            results = [self.errors(s, value, path) for s in schema["oneOf"]]
            passing = [r for r in results if not r]
            if len(passing) != 1:
                # The branch of the record's own kind says most about what is wrong.
                kind = value.get("type") if isinstance(value, dict) else None
                own = [r for s, r in zip(schema["oneOf"], results) if s.get("$ref", "").endswith("/" + str(kind))]
                if own:
                    out += own[0]
                else:
                    out.append("%s: matches %d of the %d record kinds, not exactly one" % (path, len(passing), len(results)))
        return out


def check_lines(validator, lines, name):
    """(problems, kinds seen) for the lines of one output."""
    problems, kinds = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            problems.append("%s:%d: an empty line" % (name, n))
            continue
        try:
            value = json.loads(line)
        except ValueError as e:
            problems.append("%s:%d: not JSON (%s): %s" % (name, n, e, line[:120]))
            continue
        errs = validator.errors(validator.root, value)
        problems += ["%s:%d: %s" % (name, n, e) for e in errs]
        if isinstance(value, dict):
            kinds.append(value.get("type"))
    return problems, kinds


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().split("\n\n")[-1])
        return 3
    with open(sys.argv[1]) as f:
        validator = Validator(json.load(f))
    problems = []
    for name in sys.argv[2:] or ["-"]:
        text = sys.stdin.read() if name == "-" else open(name).read()
        problems += check_lines(validator, text.splitlines(), name)[0]
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
