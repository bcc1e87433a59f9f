#!/usr/bin/env bash
# Lists the tests the last ctest run skipped, with the reason each gave (from ctest's log).
set -euo pipefail
log="$(cd "$(dirname "$0")/.." && pwd)/build/Testing/Temporary/LastTest.log"
[ -f "$log" ] || { echo "skipped.sh: no ctest log at $log"; exit 0; }
/usr/bin/env python3 - "$log" <<'PY'
import re, sys
text = open(sys.argv[1], errors="replace").read()
rows = []
# ctest's log: one block per test ("N/M Testing: NAME" ...); GoogleTest writes a skip as
# "FILE:LINE: Skipped" followed by the reason's lines.
for block in re.split(r"\n(?=\d+/\d+ Testing: )", text):
    m = re.match(r"\d+/\d+ Testing: (\S+)", block)
    if not m or "[  SKIPPED ]" not in block:
        continue
    r = re.search(r":\d+: Skipped\n(.*?)\n(?:\[  SKIPPED \]|\S+:\d+: )", block, re.S)
    reason = " ".join(r.group(1).split()) if r else ""
    rows.append((m.group(1), reason))
print(f"skipped tests: {len(rows)}")
for name, reason in rows:
    print(f"  {name}: {reason or '(no reason given)'}")
PY
