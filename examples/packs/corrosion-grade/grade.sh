#!/bin/sh
# corrosion-grade: reads /in/records.json (already validated by sbx against schemas/input.json),
# writes /out/result.json (validated by sbx against schemas/output.json before anyone sees it).
# Plain sh + awk: the input's shape is guaranteed by the schema, so a small tokenizer suffices.
set -eu
awk -f /pack/grade.awk /in/records.json > /out/result.json
