#!/usr/bin/env python3
"""Re-validates structured outputs recorded by the C++ tests with Python's `jsonschema`
(FormatChecker on) and `re`.

    DEEPINFER_GRAMMAR_SAMPLES=/tmp/samples.jsonl ./build/cpu/tests/test_grammar --gtest_filter='GrammarCorpus.*'
    DEEPINFER_GRAMMAR_SAMPLES=/tmp/samples.jsonl ./build/cpu/tests/test_engine --gtest_filter='EngineStructured*'
    python3 tools/validate_structured_outputs.py /tmp/samples.jsonl

Each input line: {"kind": "json_schema" | "regex" | "json_object", "name", "schema" | "pattern",
"output"}. Draft-07 schemas (with "$schema") use Draft7Validator, the rest Draft 2020-12.
Format checks need: pip install jsonschema rfc3339-validator (time, date-time).
Exits 1 if any output fails.
"""
import json
import re
import sys

import jsonschema
from jsonschema.validators import validator_for


def main(path):
    counts = {}
    failures = 0
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER  # the draft's own "time" (RFC 3339)
    missing = [f for f in ("date", "time", "date-time", "email", "uuid", "ipv4") if f not in checker.checkers]
    if missing:
        print(f"warning: formats not checked by this jsonschema install: {missing}")
    with open(path) as f:
        for n, line in enumerate(f, 1):
            s = json.loads(line)
            kind = s["kind"]
            counts[kind] = counts.get(kind, 0) + 1
            out = s["output"]
            try:
                if kind == "regex":
                    if re.fullmatch(s["pattern"], out) is None:
                        raise ValueError(f"/{s['pattern']}/ does not fully match")
                    continue
                value = json.loads(out)
                if kind == "json_object":
                    if s.get("object_only") and not isinstance(value, dict):
                        raise ValueError("not an object")
                    continue
                schema = s["schema"]
                cls = validator_for(schema, default=jsonschema.Draft202012Validator)
                cls(schema, format_checker=cls.FORMAT_CHECKER).validate(value)
            except Exception as e:  # noqa: BLE001 - report every failure kind
                failures += 1
                print(f"line {n} {s.get('name')}: {type(e).__name__}: {str(e)[:300]}\n  output: {out[:300]!r}")
    total = sum(counts.values())
    print(f"validated {total} outputs ({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))}); {failures} failed")
    print(f"{total - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
