"""Per step trace, its decode steps of 8 sequences: the machine's speed (median forward of steps that verified
no drafts in one attention call), the share of steps that verified drafts or asked for them, and the median
measured - predicted forward. Does a slow machine make `auto` draft more? Traces that served fixed k too
(draft-length-v13..v17, bf16-heads-ab, auto-margin-trace, lockstep/all's Eagle target) mix configurations:
their shares say nothing here. Usage, from docs/bench (output: speed_vs_drafting.txt):
    python lockstep/speed_vs_drafting.py */trace*eagle*.jsonl.gz lockstep/k1/trace-b-auto.jsonl.gz \
        lockstep/margin-per-seq-012/trace-*.jsonl.gz
"""

import gzip
import json
import statistics as st
import sys

for path in sys.argv[1:]:
    opener = gzip.open if path.endswith(".gz") else open
    rows = [json.loads(line) for line in opener(path, "rt")]
    d = [r for r in rows if r["decode"] and len(r["q_lens"]) == 8]
    if not d:
        continue
    plain = [r for r in d if all(q == 1 for q in r["q_lens"]) and not r["split"]]
    verified = sum(1 for r in d if any(q > 1 for q in r["q_lens"])) / len(d)
    asked = sum(1 for r in d if any(n > 0 for n in r["drafts_asked"])) / len(d)
    off = [r["forward_s"] - r["predicted_s"] for r in plain if r["predicted_s"] > 0]
    name = "/".join(path.split("/")[-2:])
    fwd, gap = 1e3 * st.median(r["forward_s"] for r in plain), 1e3 * st.median(off) if off else float("nan")
    print(f"{name:55s} steps {len(d):5d} no-draft forward {fwd:6.1f} ms  verified drafts {verified:5.1%}  "
          f"asked {asked:5.1%}  measured - predicted {gap:6.1f} ms")  # fmt: skip
