#!/usr/bin/python3
"""Validate sbx trace records against a JSON Schema.

usage: validate_trace.py SCHEMA FILE...

Prints one line per file ("ok FILE" or "FAIL FILE: N errors") followed, for a failure, by one
indented line per error with the JSON path of the offending member. Exit status: 0 when every file
is valid, 1 when any file is invalid or unreadable, 2 for bad usage, a broken schema or a missing
jsonschema module (so a test expecting 1 cannot pass because the tool itself broke).

Uses python3's jsonschema module (Debian: python3-jsonschema).
"""
import json
import sys


def json_path(error):
    path = "$"
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def main(argv):
    if len(argv) < 3:
        print("usage: validate_trace.py SCHEMA FILE...", file=sys.stderr)
        return 2
    try:
        import jsonschema
    except ImportError:
        print("validate_trace.py: python3 module 'jsonschema' missing (apt-get install -y python3-jsonschema)",
              file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            schema = json.load(f)
        validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        validator_cls.check_schema(schema)
    except (OSError, ValueError, jsonschema.exceptions.SchemaError) as e:
        print(f"validate_trace.py: bad schema {argv[1]}: {e}", file=sys.stderr)
        return 2
    # The schema pairs format "date-time" with a pattern, so the check holds whether or not the
    # optional format dependencies are installed.
    validator = validator_cls(schema, format_checker=jsonschema.FormatChecker())

    failed = False
    for path in argv[2:]:
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError) as e:
            print(f"FAIL {path}: cannot read JSON: {e}")
            failed = True
            continue
        errors = sorted(validator.iter_errors(record), key=lambda e: list(map(str, e.absolute_path)))
        if not errors:
            print(f"ok {path}")
            continue
        failed = True
        print(f"FAIL {path}: {len(errors)} error{'s' if len(errors) != 1 else ''}")
        for e in errors:
            print(f"  {json_path(e)}: {e.message}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
